"""The virtual clock of synchronous rounds (``clock.*``; docs/time.md): who can be sampled (online clients,
over-selection), who misses the round's deadline, and how long each round takes in virtual seconds.
No paper's own part: any recipe may turn it on. Asynchronous servers keep their clock in the loop
(``engine/loop/async_rounds.py``)."""
