"""What crosses a data channel, the same for both ends: frames, CRC-32C, Arrow IPC messages, the links
(TCP, UDT, in-memory pipes) a frame travels on, and the wire-neutral values the service answers with.

Nothing here knows a server or a client: ``dstp.transport.server`` and ``dstp.transport.client`` both
build on it, and neither imports the other (tests/test_layers.py).
"""
