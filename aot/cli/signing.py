"""``aotc sign`` and ``aotc keygen``: Ed25519 signatures on bundles (``aot/sign.py``).
Registered on the ``aotc`` group by commands.py."""

from __future__ import annotations

from pathlib import Path

import click

from ..env import from_environ
from ..output import check_output
from .options import INPUT, OUTPUT


@click.command(
    help="sign a bundle with an Ed25519 private key: appends a signature the loader checks "
    "when a service configures trusted keys; run it last, after merge",
    short_help="sign a bundle with an Ed25519 private key",
)
@click.argument("bundle", type=INPUT)
@click.option("--key", "key", type=INPUT, required=True, metavar="KEY", help="the private key")
@click.option(
    "-o", "--output", type=OUTPUT, help="write the signed bundle here (default: in place)"
)
def sign(bundle: Path, key: Path, output: Path | None) -> None:
    from ..sign import sign as sign_bundle

    from_environ()
    if output is not None:
        check_output(output)
    r = sign_bundle(bundle, key, output)
    again = "" if r.replaced is None else f" (replacing a signature by key {r.replaced})"
    click.echo(f"signed {r.output} with key {r.key_id}{again}")


@click.command(
    help="make an Ed25519 key pair for `aotc sign`: NAME.key (private, mode 0600; keep it in "
    "a CI secret) and NAME.pub (public; give it to services)",
    short_help="make an Ed25519 key pair for aotc sign",
)
@click.option("-o", "--output", "name", type=OUTPUT, required=True, metavar="NAME",
              help="writes NAME.key and NAME.pub")  # fmt: skip
def keygen(name: Path) -> None:
    from ..sign import keygen as make_keys

    from_environ()
    kp = make_keys(name)
    click.echo(
        f"wrote {kp.private} (private key: keep it secret, e.g. a CI secret) and {kp.public} "
        f"(public key: give it to services, e.g. AOTC_TRUSTED_KEYS={kp.public})\n"
        f"key id {kp.key_id}"
    )
