"""The catalog the Airflow way: an Airflow connection's properties, or a pyiceberg catalog name."""

from __future__ import annotations

import re
from typing import Any

from consistent_catalog.airflow._compat import BaseHook
from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.exceptions import InvalidInputError

#: Property names whose values never reach a log: pyiceberg's credentials (``credential``, ``token``,
#: ``s3.secret-access-key``, ``adls.account-key`` ...); a URI with a user part (``postgresql://u:p@h/db``) too.
SENSITIVE = re.compile(r"credential|secret|token|password|passwd|key", re.IGNORECASE)


class ConsistentCatalogHook(BaseHook):
    """A ``ConsistentCatalog`` from an Airflow connection of type ``consistent_catalog``, or by pyiceberg name.

    The connection's ``extra`` holds the pyiceberg catalog properties (``{"uri": ..., "warehouse": ...,
    "s3.secret-access-key": ...}``); ``host`` is the ``uri`` when ``extra`` has none; ``login`` and
    ``password`` become a REST catalog's OAuth2 ``credential`` (``login:password``). The catalog is named by
    ``extra["name"]``, else the connection id. Every value that may be a credential is registered with
    Airflow's secrets masker before use, and nothing of the connection goes into a trigger's kwargs or XCom.
    Without a connection, ``catalog`` names a pyiceberg catalog (``.pyiceberg.yaml``, ``PYICEBERG_CATALOG__*``).
    """

    conn_name_attr = "consistent_catalog_conn_id"
    default_conn_name = "consistent_catalog_default"
    conn_type = "consistent_catalog"
    hook_name = "Consistent Catalog (Iceberg)"

    def __init__(self, consistent_catalog_conn_id: str | None = None, catalog: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if consistent_catalog_conn_id is not None and catalog is not None:
            raise InvalidInputError(
                f"give a connection ({consistent_catalog_conn_id}) or a pyiceberg catalog name ({catalog}), not both"
            )
        self.consistent_catalog_conn_id = consistent_catalog_conn_id
        self.catalog_name = catalog

    def catalog_config(self) -> tuple[str | None, dict[str, str]]:
        """The catalog's name and properties (sensitive values registered with the secrets masker)."""
        if self.consistent_catalog_conn_id is None:
            return self.catalog_name, {}
        return self._config_of(self.get_connection(self.consistent_catalog_conn_id))

    async def acatalog_config(self) -> tuple[str | None, dict[str, str]]:
        """``catalog_config`` for a trigger's event loop (the connection fetched asynchronously)."""
        if self.consistent_catalog_conn_id is None:
            return self.catalog_name, {}
        return self._config_of(await self.aget_connection(self.consistent_catalog_conn_id))

    def _config_of(self, conn: Any) -> tuple[str, dict[str, str]]:
        extra = dict(conn.extra_dejson)
        name = str(extra.pop("name", None) or self.consistent_catalog_conn_id)
        properties = {str(k): str(v) for k, v in extra.items()}
        if conn.host and "uri" not in properties:
            properties["uri"] = conn.host
        if conn.password:
            properties.setdefault("credential", f"{conn.login}:{conn.password}" if conn.login else conn.password)
        mask_sensitive(properties)
        return name, properties

    def get_catalog(self) -> ConsistentCatalog:
        name, properties = self.catalog_config()
        return ConsistentCatalog.load(name, **properties)

    def get_conn(self) -> ConsistentCatalog:
        return self.get_catalog()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port"],
            "relabeling": {"host": "Catalog URI", "login": "Client id (REST)", "password": "Client secret (REST)",
                           "extra": "pyiceberg catalog properties (JSON)"},
        }


def mask_sensitive(properties: dict[str, str]) -> None:
    from airflow.sdk.log import mask_secret

    for key, value in properties.items():
        if value and (SENSITIVE.search(key) or (key == "uri" and "@" in value)):
            mask_secret(value, key)
