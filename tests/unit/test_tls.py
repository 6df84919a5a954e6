"""The webhook certificate: when it is renewed, what the bundle trusts, and a reload that never closes the port."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

from cryptography import x509

from phalanx.kube import servingcert, tls

HOSTS = ["phalanx-webhook.phalanx-system.svc", "127.0.0.1"]
NOW = datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC)


def _serving(material: tls.Material) -> x509.Certificate:
    return x509.load_pem_x509_certificate(material.cert)


def _bundle(material: tls.Material) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(material.ca_bundle)


def test_a_fresh_certificate_is_kept_until_two_thirds_of_its_validity_have_passed() -> None:
    material = tls.fresh(HOSTS, NOW)
    assert tls.renewed(material, HOSTS, NOW + datetime.timedelta(days=59)) is None
    renewed = tls.renewed(material, HOSTS, NOW + datetime.timedelta(days=61))
    assert renewed is not None
    assert renewed.ca_bundle == material.ca_bundle and renewed.ca_key == material.ca_key, "the CA stays: no bundle change"
    assert _serving(renewed).not_valid_after_utc > _serving(material).not_valid_after_utc
    assert _serving(renewed).issuer == _bundle(material)[0].subject


def test_a_host_the_certificate_does_not_name_gets_a_new_certificate() -> None:
    material = tls.fresh(HOSTS, NOW)
    assert tls.renewed(material, [*HOSTS, "localhost"], NOW) is not None
    assert tls.renewed(material, list(reversed(HOSTS)), NOW) is None


def test_a_ca_near_its_end_is_replaced_and_stays_trusted_beside_its_successor_until_it_expires() -> None:
    material = tls.fresh(HOSTS, NOW)
    old_ca = _bundle(material)[0]
    late = old_ca.not_valid_after_utc - datetime.timedelta(days=30)
    renewed = tls.renewed(material, HOSTS, late)
    assert renewed is not None
    new_ca, kept = _bundle(renewed)
    assert kept.fingerprint(kept.signature_hash_algorithm) == old_ca.fingerprint(old_ca.signature_hash_algorithm)  # type: ignore[arg-type]
    assert _serving(renewed).issuer == new_ca.subject and new_ca.not_valid_after_utc > late + tls.CA_VALIDITY / 2
    _serving(renewed).verify_directly_issued_by(new_ca)
    after = tls.renewed(renewed, HOSTS, old_ca.not_valid_after_utc + datetime.timedelta(days=1))
    assert after is not None and len(_bundle(after)) == 1, "an expired CA leaves the bundle"


async def test_the_keeper_reloads_changed_files_into_the_live_context_without_closing_the_port(tmp_path: Path) -> None:
    tls.write(tmp_path, tls.fresh(["127.0.0.1"], datetime.datetime.now(datetime.UTC)))
    published: list[bytes] = []

    async def publish(bundle: bytes) -> None:
        published.append(bundle)

    keeper = servingcert.Keeper(servingcert.DirectorySource(tmp_path), publish)
    await keeper.load()
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=keeper.context)
    port = server.sockets[0].getsockname()[1]

    async def served() -> x509.Certificate:
        client = ssl.create_default_context(cadata=(tmp_path / "ca.crt").read_text())
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return x509.load_der_x509_certificate(der)

    async with server:
        first = await served()
        await keeper.load()
        assert keeper.reloads == 0 and len(published) == 1, "unchanged files: nothing reloaded, nothing published"
        tls.write(tmp_path, tls.fresh(["127.0.0.1"], datetime.datetime.now(datetime.UTC)))
        await keeper.load()
        second = await served()
    assert keeper.reloads == 1 and len(published) == 2, "the new CA bundle was published"
    assert first.serial_number != second.serial_number, "the same listening socket serves the new certificate"
