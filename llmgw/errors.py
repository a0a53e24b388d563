"""Every error llmgw expects to meet, in one tree.

    LlmgwError                  an expected failure: the CLI prints it, no traceback
    ├── UsageError              the command line itself is wrong (exit 2)
    ├── SiteError               llmgw.yaml missing or wrong, site paths unusable
    ├── CatalogError            the catalog is invalid (carries every problem at once)
    ├── InventoryError          the inventory cannot be read or would become invalid
    ├── FactsError              facts missing, unreadable or of the wrong shape
    ├── FabricError             ibnetdiscover text that cannot be parsed (names the line)
    ├── PlanError               no plan can be made, or a saved plan is stale
    ├── StateError              the state file is unreadable, locked or of the wrong lineage
    ├── RunnerError             Ansible could not run, or a play failed on some host
    ├── LabError                the local lab (podman) cannot be set up
    ├── StoreError              the key / usage store cannot be reached or is inconsistent
    └── WeightsError            weights cannot be fetched, checked or removed safely

An error carries its context as keyword arguments (host, model, path, line) and its
message says what to change. `detail` holds extra lines shown under the summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class LlmgwError(Exception):
    """Base of every expected llmgw failure; `exit_code` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, *, detail: Sequence[str] = (), hint: str | None = None,
                 **context: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = list(detail)
        self.hint = hint
        self.context = context

    def __str__(self) -> str:
        return self.message


class UsageError(LlmgwError):
    exit_code = 2


class SiteError(LlmgwError):
    pass


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong in a YAML file, located so an editor can jump to it."""

    file: str
    line: int  # 1-based; 0 when the problem concerns the file as a whole
    path: str  # e.g. "models[0].scaling.max"; empty for file-level problems
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class CatalogError(LlmgwError):
    """The catalog is invalid; `problems` lists every problem found, not the first only."""

    def __init__(self, problems: Sequence[Problem], *, hint: str | None = None) -> None:
        self.problems = sorted(problems)
        n = len(self.problems)
        super().__init__(
            f"the catalog has {n} problem{'s' if n != 1 else ''}",
            detail=[str(p) for p in self.problems],
            hint=hint or "fix each line above, then run `llmgw catalog validate` again",
        )


class InventoryError(LlmgwError):
    pass


class FactsError(LlmgwError):
    pass


class FabricError(LlmgwError):
    pass


class PlanError(LlmgwError):
    pass


class StateError(LlmgwError):
    pass


class RunnerError(LlmgwError):
    pass


class LabError(LlmgwError):
    pass


class StoreError(LlmgwError):
    pass


class WeightsError(LlmgwError):
    pass
