"""The ticket key derivation (stdlib HMAC) against cryptography's HKDF and RFC 5869."""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given
from hypothesis import strategies as st

from dstp.transport.wire.proofs import derive_key, hello_proof, seal_key


def hkdf(key: bytes, label: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(key)


def test_rfc5869_case_3_zero_length_salt_and_info() -> None:
    # RFC 5869, appendix A.3: the first 32 of its 42 output bytes.
    okm = "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
    assert derive_key(b"\x0b" * 22, b"").hex() == okm


@given(key=st.binary(min_size=0, max_size=96), label=st.binary(max_size=64))
def test_equals_cryptography_hkdf(key: bytes, label: bytes) -> None:
    assert derive_key(key, label) == hkdf(key, label)


def test_the_labels_in_use() -> None:
    # proto/README.md: seal key = HKDF(K, "dstp seal v1"); HELLO proof =
    # HMAC-SHA256(HKDF(K, "dstp proof v1"), "hello" 0x00 ticket u16 stripe u32 attempt u64 acked).
    key, ticket = bytes(range(32)), b"T" * 27
    assert seal_key(key) == hkdf(key, b"dstp seal v1")
    fields = struct.pack(">HIQ", 3, 2, 1 << 40)
    expected = hmac.new(hkdf(key, b"dstp proof v1"), b"hello\0" + ticket + fields, hashlib.sha256).digest()
    assert hello_proof(key, ticket, 3, 2, 1 << 40) == expected
