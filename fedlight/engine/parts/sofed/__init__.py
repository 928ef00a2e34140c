"""SOFed (Gong et al. 2023): the client's data arrives as a stream through a replay buffer
(``local.schedule: stream``; the buffer's policies: ``buffer.py``). Part of the parts room: it imports no other part.
"""
