"""An Airflow provider over consistent cuts: schedulers read the cut that woke them.

=============================  ==============================================================================
``ConsistentCutSensor``        waits (deferred: no worker slot held) until the cut of some tables is fresh
                               enough, then pushes that cut to XCom
``ConsistentCutTrigger``       the sensor's trigger: polls the cut with the library's warm resolve
``ConsistentCutAssetTrigger``  for an ``AssetWatcher``: one asset event per new cut, the cut in its extra
``ConsistentCatalogHook``      the catalog from an Airflow connection (or a pyiceberg catalog name)
``PinnedCut``                  in the task: pyiceberg scans, Spark reads and Spark SQL pinned at that cut
=============================  ==============================================================================

The payload (XCom value, asset event ``extra["payload"]``) is docs/protocol.md §10.13. Needs Airflow 3
(``pip install 'consistent-catalog[airflow]'``).
"""

from __future__ import annotations

import importlib
from typing import Any

from consistent_catalog.airflow.payload import PinnedCut, cut_payload

__all__ = [
    "ConsistentCatalogHook",
    "ConsistentCutAssetTrigger",
    "ConsistentCutSensor",
    "ConsistentCutTrigger",
    "PinnedCut",
    "cut_payload",
    "get_provider_info",
]

_LAZY = {
    "ConsistentCatalogHook": "consistent_catalog.airflow.hooks",
    "ConsistentCutTrigger": "consistent_catalog.airflow.triggers",
    "ConsistentCutAssetTrigger": "consistent_catalog.airflow.triggers",
    "ConsistentCutSensor": "consistent_catalog.airflow.sensors",
}


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'consistent_catalog.airflow' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager lists (the ``apache_airflow_provider`` entry point)."""
    from consistent_catalog import __version__

    return {
        "package-name": "consistent-catalog",
        "name": "Consistent Catalog",
        "description": "Consistent multi-table cuts over Apache Iceberg: a deferrable sensor and an asset watcher trigger",
        "versions": [__version__],
        "connection-types": [
            {"connection-type": "consistent_catalog",
             "hook-class-name": "consistent_catalog.airflow.hooks.ConsistentCatalogHook"},
        ],
        "hooks": [{"integration-name": "Consistent Catalog",
                   "python-modules": ["consistent_catalog.airflow.hooks"]}],
        "sensors": [{"integration-name": "Consistent Catalog",
                     "python-modules": ["consistent_catalog.airflow.sensors"]}],
        "triggers": [{"integration-name": "Consistent Catalog",
                      "python-modules": ["consistent_catalog.airflow.triggers"]}],
    }
