"""Airflow's imports, with the way out when Airflow is missing."""

from __future__ import annotations

from consistent_catalog.exceptions import NotInstalledError

try:
    from airflow.sdk import BaseHook, BaseSensorOperator
    from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout, AirflowSkipException
    from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent
except ImportError as exc:  # pragma: no cover - the message is the point
    raise NotInstalledError(
        f"consistent_catalog.airflow needs Airflow 3 ({exc}): pip install 'consistent-catalog[airflow]'"
    ) from exc

__all__ = ["AirflowException", "AirflowSensorTimeout", "AirflowSkipException", "BaseEventTrigger", "BaseHook", "BaseSensorOperator", "BaseTrigger", "TriggerEvent"]
