"""Which forwarding pipeline does the device run, and which one is saved for later?

SetForwardingPipelineConfig (spec 13): VERIFY checks a P4Info, VERIFY_AND_SAVE
keeps it beside the committed one until COMMIT, VERIFY_AND_COMMIT replaces the
pipeline and its entries, RECONCILE_AND_COMMIT keeps the entries (translated by
name). Whenever the committed pipeline changes, the packet path is rebuilt from
its entries in one batch. `PipelineConfigs` is not locked itself: the `Device`
calls it under its lock, after checking the device id and the primary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from google.rpc import code_pb2

from controlplane.p4info import P4InfoIndex
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.arbitration import fmt_election
from emulation.softswitch.dataplane_effects import dataplane_effect
from emulation.softswitch.entry_validation import (
    EntryKey,
    initial_default_entry,
    validate_table_entry,
)
from emulation.softswitch.errors import EntryError
from emulation.softswitch.pipeline_check import check_pipeline
from emulation.softswitch.state import Change, ClearTables, Dataplane
from topologies.errors import UserInputError

log = logging.getLogger("emulation.softswitch.device")

_Update = p4runtime_pb2.Update
_SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GetType = p4runtime_pb2.GetForwardingPipelineConfigRequest


@dataclass
class InstalledPipeline:
    """A forwarding pipeline config and the entries written against it."""

    config: Any  # p4runtime_pb2.ForwardingPipelineConfig
    index: P4InfoIndex
    entries: dict[int, dict[EntryKey, Any]] = field(default_factory=dict)
    defaults: dict[int, Any] = field(default_factory=dict)

    @classmethod
    def new(cls, config: Any, index: P4InfoIndex) -> InstalledPipeline:
        pipeline = cls(config=config, index=index)
        for table in index.tables:
            pipeline.entries[table.id] = {}
            pipeline.defaults[table.id] = initial_default_entry(index, table)
        return pipeline


class PipelineConfigs:
    """The committed pipeline and the saved one of one device."""

    def __init__(self, device_id: int, dataplane: Dataplane, reference: P4InfoIndex | None) -> None:
        self.device_id = device_id
        self.dataplane = dataplane
        # The P4Info a pushed pipeline must match; None accepts any supported P4Info.
        self.reference = reference
        self.committed: InstalledPipeline | None = None
        self.saved: InstalledPipeline | None = None  # VERIFY_AND_SAVE'd, not yet committed

    def set(self, request: Any, election_id: int) -> None:
        """SetForwardingPipelineConfig (spec 13) by the primary of `election_id`."""
        action = request.action
        if action not in _SetAction.Action.values():
            raise EntryError(
                code_pb2.INVALID_ARGUMENT, f"unknown SetForwardingPipelineConfig action {action}"
            )
        name = _SetAction.Action.Name(action)
        if action == _SetAction.COMMIT:
            if request.HasField("config"):
                raise EntryError(code_pb2.INVALID_ARGUMENT, "COMMIT takes no config")
            if self.saved is None:
                raise EntryError(
                    code_pb2.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)"
                )
            self.committed, self.saved = self.saved, None
            self._rebuild_dataplane(self.committed, zero_counters=True)
            log.info("device %d: committed the saved pipeline", self.device_id)
            return
        if action == _SetAction.UNSPECIFIED:
            raise EntryError(
                code_pb2.INVALID_ARGUMENT, "SetForwardingPipelineConfig action is unset"
            )
        if not request.HasField("config") or not request.config.HasField("p4info"):
            raise EntryError(code_pb2.INVALID_ARGUMENT, f"{name} needs a config with a P4Info")
        index = check_pipeline(request.config.p4info, self.reference)
        config = p4runtime_pb2.ForwardingPipelineConfig()
        config.CopyFrom(request.config)
        if action == _SetAction.VERIFY:
            log.info("device %d: verified a pipeline (%s)", self.device_id, summary(index))
            return
        pipeline = InstalledPipeline.new(config, index)
        if action == _SetAction.VERIFY_AND_SAVE:
            self.saved = pipeline
        elif action == _SetAction.VERIFY_AND_COMMIT:
            self.committed, self.saved = pipeline, None
            self._rebuild_dataplane(pipeline, zero_counters=True)
        elif action == _SetAction.RECONCILE_AND_COMMIT:
            if self.committed is not None:
                _carry_entries(self.committed, pipeline)
            self.committed, self.saved = pipeline, None
            self._rebuild_dataplane(pipeline, zero_counters=False)
        else:
            raise EntryError(code_pb2.INVALID_ARGUMENT, f"unknown action {action}")
        log.info(
            "device %d: %s by election id %s: %s, device config %d bytes",
            self.device_id,
            name,
            fmt_election(election_id),
            summary(index),
            len(config.p4_device_config),
        )

    def get(self, request: Any) -> Any:
        """GetForwardingPipelineConfig: the committed config, unset before any (spec 14)."""
        response = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        if self.committed is None:
            return response
        stored = self.committed.config
        kind = request.response_type
        if kind == _GetType.ALL:
            response.config.CopyFrom(stored)
        else:
            if stored.HasField("cookie"):
                response.config.cookie.CopyFrom(stored.cookie)
            else:
                response.config.SetInParent()
            if kind == _GetType.P4INFO_AND_COOKIE:
                response.config.p4info.CopyFrom(stored.p4info)
            elif kind == _GetType.DEVICE_CONFIG_AND_COOKIE:
                response.config.p4_device_config = stored.p4_device_config
        return response

    def current(self) -> InstalledPipeline:
        """The pipeline Reads and Writes refer to: the saved one if any (spec 13), else committed."""
        pipeline = self.saved or self.committed
        if pipeline is None:
            raise EntryError(
                code_pb2.FAILED_PRECONDITION, "no forwarding pipeline config has been set"
            )
        return pipeline

    def _rebuild_dataplane(self, pipeline: InstalledPipeline, *, zero_counters: bool) -> None:
        """Make the packet path see exactly the pipeline's entries (one batch)."""
        changes: list[Change] = [ClearTables(zero_counters)]
        for table_entries in pipeline.entries.values():
            for entry in table_entries.values():
                effect = dataplane_effect(pipeline.index, entry, deleted=False)
                if effect is not None:
                    changes.append(effect)
        self.dataplane.apply(changes)


def summary(index: P4InfoIndex) -> str:
    """'2 tables, 5 actions, 4 counters'."""
    return (
        f"{len(index.tables)} tables, {len(index.actions)} actions, {len(index.counters)} counters"
    )


def _carry_entries(old: InstalledPipeline, new: InstalledPipeline) -> None:
    """RECONCILE_AND_COMMIT: move entries to the new P4Info by name, or refuse (spec 13)."""
    for table_entries in old.entries.values():
        for entry in table_entries.values():
            moved = _rename_ids(old.index, new.index, entry)
            valid = validate_table_entry(new.index, moved, _Update.INSERT)
            new.entries.setdefault(valid.table.id, {})[valid.key] = valid.entry
    for entry in old.defaults.values():
        moved = _rename_ids(old.index, new.index, entry)
        new.defaults[moved.table_id] = moved


def _rename_ids(old: P4InfoIndex, new: P4InfoIndex, entry: Any) -> Any:
    """The same entry with the new P4Info's ids, found by name."""
    try:
        old_table = old.table_by_id(entry.table_id)
        new_table = new.table(old_table.name)
        moved = p4runtime_pb2.TableEntry()
        moved.CopyFrom(entry)
        moved.table_id = new_table.id
        for match in moved.match:
            name = old_table.match_field_by_id(match.field_id).name
            match.field_id = new_table.match_field(name).id
        if moved.HasField("action") and moved.action.action.action_id:
            old_action = old.action_by_id(moved.action.action.action_id)
            new_action = new.action(old_action.name)
            moved.action.action.action_id = new_action.id
            for param in moved.action.action.params:
                name = old_action.param_by_id(param.param_id).name
                param.param_id = new_action.param(name).id
        return moved
    except UserInputError as err:
        raise EntryError(
            code_pb2.INVALID_ARGUMENT, f"cannot keep the installed entries: {err}"
        ) from None
