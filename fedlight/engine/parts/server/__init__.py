"""The aggregator's own numbers as a round plug-in: what ``Aggregator.metrics`` reports each
round (DP-FedAvg's privacy spent, McMahan et al. 2018) in the history and TensorBoard. Part of
the parts room: it imports no other part.
"""
