"""Time in the simulation: every client trip's virtual duration, who is online when, and the order in which
asynchronous updates arrive. Pure numpy, no torch and no engine: the round loop, its parts and the tests
read it alike, and nothing here ever sleeps.

* ``devices``: each client's device (seconds a sample, bandwidth up and down, latency) from a seeded
  distribution or a trace file, and its availability (always, a seeded on/off process, or the trace's windows).
* ``events``: the asynchronous server's event schedule (FedAsync, FedBuff): which client trains from which
  model version, and which updates reach the server at each of its steps, in virtual-time order.
"""
