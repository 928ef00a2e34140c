"""LG-FedAvg (Liang et al. 2020): the local-test evaluations of section 2.4 and the rotated new
device of section 3.2. Part of the parts room: it imports no other part.
"""
