"""The client's side of the data channels: the ``DataChannel`` contract and its striped TCP, UDT and
in-memory implementations, the receiver, kept connections, the auto-tuner and resumable file downloads.

The Python client (clients/python/) builds on it; the server never imports it (tests/test_layers.py).
"""
