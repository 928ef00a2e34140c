"""FedAvg's client side (McMahan et al. 2017): ``local.epochs`` epochs over the client's own
data, the default schedule of every paper. Part of the parts room: it imports no other part.
"""
