"""Wheel build hook: the core/ folder is installed as the package ``pufferfish_core``.

The code imports ``pufferfish_core`` everywhere; in a checkout the symlink ``pufferfish_core ->
core`` serves those imports (an editable install puts the checkout on sys.path), and a built wheel
carries the folder under that name. No top-level ``core`` is installed: a user's own ``core``
package would shadow it (issue 38).
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CoreAsPufferfishCore(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "standard":
            build_data["force_include"]["core"] = "pufferfish_core"
