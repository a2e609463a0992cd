"""Tickets are bound to the principal that asked and proved with the offer's key (issue 13, item 3).

The attacks of the issue, over real gRPC with TLS and tokens: a stranger who
holds a victim's ticket cannot redeem it (the victim then still can), nor can
another principal who stole the whole offer, key included. The data-channel
attacks (joining a striped transfer, replaying a HELLO) are in the channel
conformance suite (tests/transport/test_channels.py), for every channel.
"""

from __future__ import annotations

from typing import Any, Iterator

import grpc
import pytest

import dstp
from authcase import BEFORE
from dstp.auth import TokenStore

from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.server import DstpServer
from dstp.transport.wire.proofs import fetch_proof

SQL = "select humidity from ccm3 limit 5"


@pytest.fixture(scope="module")
def stub(auth_server: DstpServer, tls: Any) -> Iterator[pb_grpc.DstpStub]:
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.cert_path.read_bytes())
    with grpc.secure_channel(auth_server.endpoints.grpc, credentials) as channel:
        yield pb_grpc.DstpStub(channel)


def as_(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def refused(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        list(call())
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert dict(info.value.trailing_metadata())["dstp-error-code"] == "bad_ticket"
    return info.value


@pytest.mark.parametrize("owner", [None, "alice"], ids=["anonymous", "alice"])
def test_a_stranger_with_the_ticket_cannot_redeem_it_and_the_owner_still_can(stub: pb_grpc.DstpStub, tokens: Any,
                                                                             owner: str | None) -> None:
    token = getattr(tokens, owner) if owner else None
    offer = stub.Query(pb.QueryRequest(sql=SQL, channels=[pb.CHANNEL_KIND_GRPC_STREAM]), metadata=as_(token)).offers[0]
    assert len(offer.key) == 32
    # the same principal (an anonymous stranger is "the same" anonymous): no proof, a wrong proof
    for proof in (b"", fetch_proof(b"k" * 32, offer.ticket)):
        err = refused(lambda: stub.Fetch(pb.FetchRequest(ticket=offer.ticket, proof=proof), metadata=as_(token)))
        assert "proof" in err.details()
    # another principal holding the whole offer, key included
    err = refused(lambda: stub.Fetch(pb.FetchRequest(ticket=offer.ticket, proof=fetch_proof(offer.key, offer.ticket)),
                                     metadata=as_(tokens.bob)))
    assert "another client" in err.details()
    fetched = list(stub.Fetch(pb.FetchRequest(ticket=offer.ticket, proof=fetch_proof(offer.key, offer.ticket)),
                              metadata=as_(token)))
    assert fetched[-1].summary.rows == 5


def test_file_tickets_are_bound_too(stub: pb_grpc.DstpStub, tokens: Any) -> None:
    reply = stub.OpenFile(pb.OpenFileRequest(dataset="polar", file="ocean_2000-01.nc",
                                             channels=[pb.CHANNEL_KIND_GRPC_STREAM]), metadata=as_(tokens.alice))
    offer = reply.offers[0]
    refused(lambda: stub.FetchFile(pb.FetchRequest(ticket=offer.ticket), metadata=as_(tokens.alice)))
    refused(lambda: stub.FetchFile(pb.FetchRequest(ticket=offer.ticket, proof=fetch_proof(offer.key, offer.ticket)),
                                   metadata=as_(tokens.bob)))
    chunks = list(stub.FetchFile(pb.FetchRequest(ticket=offer.ticket, proof=fetch_proof(offer.key, offer.ticket)),
                                 metadata=as_(tokens.alice)))
    assert sum(len(c.data) for c in chunks) == reply.size


def test_offers_of_a_tls_server_seal_the_data_channels(stub: pb_grpc.DstpStub, tokens: Any) -> None:
    reply = stub.Query(pb.QueryRequest(sql=SQL, channels=[pb.CHANNEL_KIND_GRPC_STREAM, pb.CHANNEL_KIND_STRIPED_TCP]),
                       metadata=as_(tokens.alice))
    ciphers = {o.kind: o.cipher for o in reply.offers}
    assert ciphers == {pb.CHANNEL_KIND_GRPC_STREAM: "", pb.CHANNEL_KIND_STRIPED_TCP: "aes-256-gcm"}
    assert len({o.key for o in reply.offers}) == 2  # one key per ticket


def test_a_ticket_stops_working_when_its_token_is_revoked(auth_server: DstpServer, tokens: Any, tls: Any) -> None:
    # A data channel carries no credential: the ticket must check the one it was issued for when redeemed.
    # (Over gRPC the records come in the call that presented the token: nothing is left to redeem later.)
    store = TokenStore(tokens.path, clock=lambda: BEFORE - 86400)
    erin = store.create("erin", ["polar"])
    with dstp.Client(auth_server.endpoints.grpc, token=erin.secret, tls=True, ca_file=str(tls.cert_path)) as c:
        planned = c.plan

        def plan_then_revoke(*args: Any, **kwargs: Any) -> Any:
            info = planned(*args, **kwargs)  # the ticket is issued; the operator revokes the token now
            store.revoke(erin.record.id)
            return info

        c.plan = plan_then_revoke  # type: ignore[method-assign]
        with pytest.raises(dstp.AuthenticationError, match=f"token {erin.record.id} was revoked"):
            c.query("select salinity from polar where lat > 60", transport="striped")
