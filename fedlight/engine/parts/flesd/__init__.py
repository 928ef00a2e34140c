"""FLESD's server side (Shi et al. 2022): clients send public-set similarities, the server
distils the ensemble (ESD's key queue, target and loss: ``esd.py``). Part of the parts room: it imports no other part.
"""
