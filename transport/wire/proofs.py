"""Ticket proofs: how a redeemer shows it holds the ticket key without sending it, and the sealing key.

Each ticket comes with a *ticket key* (32 random bytes) that the server returns
only to the client that asked, in the same answer (``ChannelOffer.key``).
Redeeming proves knowledge of the key without sending it (proto/README.md,
"Tickets are bound"):

    fetch_proof(key, ticket)                          FetchRequest.proof (gRPC Fetch, FetchFile)
    hello_proof(key, ticket, stripe, attempt, acked)  HELLO "proof" on a data channel, every stripe
    seal_key(key)                                     the AES-256-GCM key of a sealed transfer (frames.py)

Each is keyed by HKDF-SHA256(ticket key, info=label), so the proof key and
the sealing key are independent. A stranger who learned a ticket (a log, a
HELLO read off the wire) cannot redeem it, join its transfer or replay a
stripe's HELLO (``attempt`` must grow). The client computes these and the
server (:mod:`dstp.transport.server.tickets`, the doors) checks them: they are
part of the wire, like a frame.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

__all__ = ["check_proof", "derive_key", "fetch_proof", "hello_proof", "seal_key"]


def derive_key(key: bytes, label: bytes) -> bytes:
    """Return HKDF-SHA256(``key``, salt empty, info ``label``), 32 bytes (RFC 5869).

    One output block is two HMACs (extract, then expand with counter 1), so the
    standard library's ``hmac`` does it; importing ``cryptography`` for it cost
    every client ~10 ms of start-up. tests/transport/test_tickets_kdf.py checks
    it against ``cryptography``'s HKDF and RFC 5869's test vectors.
    """
    prk = hmac.new(bytes(hashlib.sha256().digest_size), key, hashlib.sha256).digest()
    return hmac.new(prk, label + b"\x01", hashlib.sha256).digest()


def fetch_proof(key: bytes, ticket: bytes) -> bytes:
    """Return the proof a gRPC Fetch/FetchFile sends: HMAC-SHA256(K, "fetch" 0x00 ‖ ticket)."""
    return hmac.new(derive_key(key, b"dstp proof v1"), b"fetch\0" + ticket, hashlib.sha256).digest()


def hello_proof(key: bytes, ticket: bytes, stripe: int, attempt: int, acked: int) -> bytes:
    """Return the proof a HELLO sends: HMAC-SHA256(K, "hello" 0x00 ‖ ticket ‖ u16 stripe ‖ u32 attempt ‖ u64 acked)."""
    fields = struct.pack(">HIQ", stripe, attempt, acked)
    return hmac.new(derive_key(key, b"dstp proof v1"), b"hello\0" + ticket + fields, hashlib.sha256).digest()


def seal_key(key: bytes) -> bytes:
    """Return the AES-256-GCM key a sealed transfer's frames use."""
    return derive_key(key, b"dstp seal v1")


def check_proof(expected: bytes, given: bytes) -> bool:
    """Return whether ``given`` is ``expected`` (compared in constant time)."""
    return hmac.compare_digest(expected, given)
