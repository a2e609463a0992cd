"""The server's side of the data channels: tickets, message sources, transfers and the listeners that
turn a HELLO into frames. The service (dstp/service/) sits above it; no client code is imported here.
"""
