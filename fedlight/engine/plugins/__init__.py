"""The built-in parts of a round, one per file (``fedlight.engine.plugin`` has their interfaces).

Client schedules: ``epochs`` (every paper's default), ``stream`` (SOFed), ``exchange``
(CF-CL). Round plug-ins: ``distillation`` (FLESD's server side), ``local_test`` (LG-FedAvg's
evaluations), ``new_device`` (LG-FedAvg sec. 3.2's rotated device, online), ``faults`` (simulated
client failures). None imports another; the round loop
imports none of them (``fedlight.engine.assemble`` picks them for a recipe).
"""
