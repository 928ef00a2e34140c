"""FLESD's server side (Shi et al. 2022): clients send public-set similarities, the server
distils the ensemble. Part of the parts room: it imports no other part.
"""
