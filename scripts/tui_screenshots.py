"""Screenshots of the console's views for docs/tui/: SVG from Textual, PNG from resvg.

Run: `.venv/bin/pip install -e '.[docs]'` once (resvg-py: a PyPI wheel of resvg, no system
library), then `.venv/bin/python scripts/tui_screenshots.py [--racks 128] [--out docs/tui]`.
The console runs headless at 200x60 on the demo source of `rackplane tui --demo 128`: the
seeded story, then the in-process engine (`EngineSource`, mode DEMO), so the status line says
what an operator sees.
Without resvg-py the script stops before writing anything. Text is drawn in DejaVu Sans Mono
(Debian's fonts-dejavu-core); resvg falls back to another monospace font where it is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rackplane.tui import ConsoleApp
from rackplane.tui.sample import demo_source

VIEWS = {
    "cluster": ("1",),
    "rack-detail": ("down", "down", "enter"),
    "jobs": ("2",),
    "events": ("3",),
    "alerts": ("4",),
    "queues": ("5",),
    "time-travel": ("g", "1", "5", "0", "enter", "n", "1"),
}


async def shoot(racks: int, out: Path) -> list[Path]:
    svgs = []
    for name, keys in VIEWS.items():
        # A fresh engine per view: each screenshot starts where the story ends.
        app = ConsoleApp(demo_source(racks), actor="operator:docs")
        async with app.run_test(size=(200, 60)) as pilot:
            await pilot.pause()
            await pilot.press(*keys)
            await pilot.pause(0.5)
            path = out / f"{name}.svg"
            path.write_text(app.export_screenshot(title=f"rackplane tui: {name}"))
            svgs.append(path)
    return svgs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--racks", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path("docs/tui"))
    parser.add_argument("--keep-svg", action="store_true")
    args = parser.parse_args()
    try:
        import resvg_py  # type: ignore[import-not-found]
    except ImportError:
        print("needs resvg-py: .venv/bin/pip install -e '.[docs]'", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for svg in asyncio.run(shoot(args.racks, args.out)):
        png = bytes(resvg_py.svg_to_bytes(svg_path=str(svg), font_family="DejaVu Sans Mono",
                                          monospace_family="DejaVu Sans Mono"))  # fmt: skip
        svg.with_suffix(".png").write_bytes(png)
        if not args.keep_svg:
            svg.unlink()
        print(svg.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
