"""A compiled folder that cannot run on this machine (an Android library): export only.

art = tir.compile(model, target="android-arm64")
art.export("build/")        # copy it to the device and link it into the app
art.run(feeds)              # TirError: it runs on the device, not here
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tensorir.errors import TirError
from tensorir.runtime.module import export_folder


class Artifact:
    """A compiled folder for another machine: its manifest, inputs, outputs and `export`."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.manifest = json.loads((self.dir / "manifest.json").read_text())
        self.inputs = self.manifest["inputs"]
        self.outputs = self.manifest["outputs"]

    def _cannot_run(self) -> TirError:
        m = self.manifest
        return TirError(
            f"{self.dir}: built for {m['target']} ({m['triple']}); it cannot run on this machine: "
            "export it and run it on the device"
        )

    def run(self, inputs: Any) -> list:
        raise self._cannot_run()

    def bind(self, inputs: Any) -> Any:
        raise self._cannot_run()

    def profile(self, inputs: Any, repeat: int = 10) -> list:
        raise self._cannot_run()

    def set_num_threads(self, n: int) -> None:
        raise self._cannot_run()

    def export(self, out: str | Path) -> Path:
        return export_folder(self.dir, out)
