"""Replay-buffer policies for streaming clients (SOFed): fifo, reservoir, kcenter, importance."""
