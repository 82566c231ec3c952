"""moto's server for AWS Glue (and S3), made to behave as Glue does: ``python -m tests.harness.moto_glue PORT``.

moto 5.2 ignores ``UpdateTable``'s ``VersionId``: two writers that both read version 7 both succeed, and
the second silently replaces the first (issue 44: 13 of 113 concurrent commits were lost without an error).
Real Glue refuses an ``UpdateTable`` whose ``VersionId`` is not the table's current one with
``ConcurrentModificationException``, which is the compare-and-swap every Glue client (pyiceberg's
``GlueCatalog``, Iceberg's ``GlueTableOperations`` without a lock manager) builds its commits on. This
launcher adds that check to moto's Glue backend, atomically with the update (moto's server is threaded),
and honours ``SkipArchive=true`` (Glue keeps no version archive then; moto keeps every version in memory).

``--unpatched`` runs moto as it is: the catalog probe must refuse it (``consistent-catalog check-catalog``).
The patch lives in this process only (the test process's own moto S3 server is not touched).
"""

from __future__ import annotations

import argparse
import threading
from typing import Any


def patch_glue_version_check() -> None:
    """``UpdateTable`` with a stale ``VersionId``: ``ConcurrentModificationException``, as Glue answers it."""
    from moto.glue.exceptions import GlueClientError
    from moto.glue.responses import GlueResponse

    class ConcurrentModificationException(GlueClientError):
        def __init__(self, message: str) -> None:
            super().__init__("ConcurrentModificationException", message)

    swap = threading.Lock()  # the check and the update are one step, as in Glue
    plain = GlueResponse.update_table

    def update_table(self: GlueResponse) -> Any:
        database_name = self.parameters.get("DatabaseName")
        table_name = (self.parameters.get("TableInput") or {}).get("Name")
        expected = self.parameters.get("VersionId")
        with swap:
            table = self.glue_backend.get_table(database_name, table_name)
            current = str(table._current_version)
            if expected is not None and str(expected) != current:
                raise ConcurrentModificationException(
                    f"Update table failed due to concurrent modifications: table version {current}, "
                    f"the update expected {expected}")
            answer = plain(self)
            if str(self.parameters.get("SkipArchive", "false")).lower() == "true":
                table.versions.pop(current, None)  # no archived version, as Glue with SkipArchive
            return answer

    GlueResponse.update_table = update_table  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--unpatched", action="store_true", help="moto as it is (VersionId ignored)")
    args = parser.parse_args(argv)
    if not args.unpatched:
        patch_glue_version_check()
    from moto.server import main as moto_main

    moto_main(["-H", "127.0.0.1", "-p", str(args.port)])


if __name__ == "__main__":
    main()
