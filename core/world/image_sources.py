"""Freely licensed images and fonts from Debian packages: photographs beyond scikit-image's 21 (wallpaper sets) and
the fonts core/world/text_images.py renders text in. Installed by this project's setup step, never by hand; one whole
package is held out, so the held-out split shows photographs of a source training never saw.

    python -m core.world.image_sources --install     # apt-get install the packages (root; CI runs it; no Pillow needed)
    python -m core.world.image_sources               # what is installed: packages, images, licences (needs Pillow)
    python -m core.world.image_sources --export DIR  # the pictures, fonts and licences as one folder, for a machine
    SPECULUM_IMAGE_SOURCES=DIR python -m core train tower ...   # without Debian's packages (a GPU box): read from it
    python -m core.world.photos --heldout-views DIR --views 100 --of wallpaper   # views of the held-out package's

Each package's licence is its Debian copyright file, beside the images in /usr/share/doc/PACKAGE/copyright; the
training logs name the packages trained on, and docs/models.md their licences. Nothing of them is committed.

An exported folder holds PACKAGE/NNN-NAME (each picture as `load` gives it, saved as JPEG whatever NAME's suffix,
numbered in `photographs`' order so that a (split, index) draws the same picture), PACKAGE/copyright, and
fonts/NNN-NAME (`fonts()`, in their order) with fonts/PACKAGE.copyright: 29 MB, 15 MB as .tar.xz, small enough to
travel with the repository to a machine that cannot reach Debian's archive (scripts/device_tower.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

# package -> split that draws from it; licences as their Debian copyright files (Debian 12) give them.
PHOTO_PACKAGES = {
    "plasma-workspace-wallpapers": "train",  # KDE Plasma's wallpapers (GPL-2+)
    "gnome-backgrounds": "train",  # GNOME's backgrounds (CC-BY-SA-3.0)
    "lomiri-wallpapers": "train",  # Lomiri's backgrounds (CC-BY-4.0, CC-BY-SA-3.0/4.0, CC0-1.0, Expat)
    # From target run 22 on: photographs of nature and rooms beside more artwork. sway-backgrounds is not used: every
    # picture of it carries the word "SWAY".
    "mate-backgrounds": "train",  # MATE's backgrounds (GPL-2+, CC-BY-SA-4.0)
    "lomiri-wallpapers-16.04": "train",  # as lomiri-wallpapers (one source package)
    "lomiri-wallpapers-20.04": "train",
    "ukui-wallpapers": "heldout",  # UKUI's wallpapers (CC-BY-SA-3.0): held out whole
}
# GPL-2+ with the Bitstream Vera licence, OFL-1.1, GPL-3+ with the font exception, AGPL-3 with the font exception
FONT_PACKAGES = ("fonts-dejavu-core", "fonts-liberation", "fonts-freefont-ttf", "fonts-urw-base35")
FONT_DIRS = (Path("/usr/share/fonts"), Path("/usr/local/share/fonts"))
# Fonts whose letters are pictures (URW's Dingbats): what they draw is shapes, not text.
PICTURE_FONTS = ("D050000L",)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
FONT_SUFFIXES = (".ttf", ".otf")
LONGEST_SIDE = 768  # photographs are kept this large in memory: training resamples them far smaller anyway
# A resolution in a file name: Plasma's "1920x1080.jpg", MATE's "Elephants_3840x2160.jpg".
RESOLUTION = re.compile(r"(?:^|_)(\d+)x\d+$")
EXPORTED = "SPECULUM_IMAGE_SOURCES"  # environment variable: a folder `--export` wrote, read instead of the packages


def install() -> None:
    """apt-get install every package (needs root and Debian's archive)."""
    if shutil.which("apt-get") is None:
        raise SystemExit("apt-get not found: the image sources are Debian packages (a Debian or Ubuntu machine)")
    packages = [*PHOTO_PACKAGES, *FONT_PACKAGES]
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], check=True)


def exported() -> Path | None:
    """The exported folder the environment names, or None: the installed packages."""
    folder = os.environ.get(EXPORTED)
    return Path(folder) if folder else None


def _package_files(package: str) -> list[Path]:
    if shutil.which("dpkg") is None:
        return []
    listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True)
    return [Path(p) for p in listed.stdout.splitlines() if Path(p).suffix.lower() in IMAGE_SUFFIXES]


@lru_cache(maxsize=None)
def photographs(package: str) -> tuple[str, ...]:
    """A package's images, one per picture (a wallpaper shipped at many resolutions: the one nearest 1920 wide),
    sorted; empty where the package is not installed. An overlay (a picture with transparent pixels, whose look
    depends on the desktop beneath it) is not a photograph and is left out. From an exported folder: its pictures."""
    if (folder := exported()) is not None:
        return _exported_files(folder / package, IMAGE_SUFFIXES)
    by_picture: dict[Path, list[Path]] = {}
    for path in _package_files(package):
        if not path.is_file() or path.stem == "screenshot":  # Plasma's preview of a wallpaper
            continue
        # Plasma keeps each picture's resolutions in NAME/contents/images[_dark]/WxH.jpg; MATE names them
        # NAME_WxH.jpg beside NAME.jpg; elsewhere a file is a picture.
        if path.parent.parent.name == "contents":
            key = path.parent
        else:
            key = path.with_name(RESOLUTION.sub("", path.stem))
        by_picture.setdefault(key, []).append(path)

    def width(p: Path) -> int:
        found = RESOLUTION.search(p.stem)
        return int(found.group(1)) if found else 1920

    chosen = (min(paths, key=lambda p: abs(width(p) - 1920)) for paths in by_picture.values())
    return tuple(sorted(str(p) for p in chosen if not _transparent(p)))  # one decode per picture, not per resolution


def _transparent(path: Path) -> bool:
    from PIL import Image

    with Image.open(path) as image:
        return image.mode in ("RGBA", "LA", "PA") and image.getchannel("A").getextrema()[0] < 255


def _numbered(number: int, path: str) -> str:
    """An exported file's name: its place in the export's order, then the name it had (picture_name reads it back)."""
    return f"{number:03d}-{Path(path).name}"


def _exported_files(folder: Path, suffixes: tuple[str, ...]) -> tuple[str, ...]:
    """An exported folder's files of those suffixes, in the order they were exported (their numbers)."""
    return tuple(sorted(str(p) for p in folder.glob("*") if p.suffix.lower() in suffixes))


def picture_name(path: str) -> str:
    """The picture's file name in its package (what photographs.PHOTOS_WITH_TEXT names), also for an exported copy."""
    name = Path(path).name
    return name.split("-", 1)[1] if exported() is not None and re.match(r"\d{3}-", name) else name


@lru_cache(maxsize=1)
def fonts() -> tuple[str, ...]:
    """The TrueType / OpenType fonts text is drawn in (core/world/text_images.py): the machine's but PICTURE_FONTS,
    sorted (an empty tuple: Pillow's default font only); from an exported folder, its fonts in the order exported."""
    if (folder := exported()) is not None:
        return _exported_files(folder / "fonts", FONT_SUFFIXES)
    found = {str(p) for root in FONT_DIRS if root.is_dir() for p in root.rglob("*")
             if p.suffix.lower() in FONT_SUFFIXES and p.stem not in PICTURE_FONTS}
    return tuple(sorted(found))


def split_photographs(split: str) -> tuple[str, ...]:
    """The photographs a split draws from: the held-out package's, or the others'."""
    return tuple(p for package, used in PHOTO_PACKAGES.items() if used == ("heldout" if split == "heldout" else "train")
                 for p in photographs(package))


@lru_cache(maxsize=128)
def load(path: str) -> Image.Image:
    """A photograph as RGB, its longest side at most LONGEST_SIDE (JPEGs decoded at a reduced scale: fast)."""
    from PIL import Image  # here, so that a bare interpreter runs --install before the project's packages are in

    image = Image.open(path)
    image.draft("RGB", (LONGEST_SIDE, LONGEST_SIDE))
    image = image.convert("RGB")
    image.thumbnail((LONGEST_SIDE, LONGEST_SIDE), Image.Resampling.BOX)
    return image


def licence_path(package: str) -> Path:
    """Where a package's licence is: its Debian copyright file, or the exported folder's copy."""
    folder = exported()
    return folder / package / "copyright" if folder is not None else Path("/usr/share/doc") / package / "copyright"


def licence(package: str) -> str | None:
    path = licence_path(package)
    return path.read_text(errors="replace") if path.is_file() else None


def _owners(paths) -> set[str]:
    """The Debian packages that installed `paths`."""
    if not paths or shutil.which("dpkg") is None:
        return set()
    found = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True).stdout
    return {line.split(":")[0] for line in found.splitlines() if ":" in line}


def export(folder: Path) -> dict:
    """Write the installed packages' pictures (as `load` gives them), the fonts text is drawn in and every licence to
    `folder`, laid out as the module docstring says; returns what was written, per package."""
    if exported() is not None:
        raise ValueError(f"{EXPORTED} is set: export from the installed packages, not from another export")
    written = {}
    for package in PHOTO_PACKAGES:
        pictures = photographs(package)
        if not pictures:
            raise RuntimeError(f"{package} is not installed: python -m core.world.image_sources --install")
        (folder / package).mkdir(parents=True, exist_ok=True)
        for number, path in enumerate(pictures):
            load(path).save(folder / package / _numbered(number, path), format="JPEG", quality=92)
        (folder / package / "copyright").write_text(licence(package) or "")
        written[package] = len(pictures)
    (font_folder := folder / "fonts").mkdir(parents=True, exist_ok=True)
    for number, path in enumerate(fonts()):
        shutil.copyfile(path, font_folder / _numbered(number, path))
    for package in sorted(set(FONT_PACKAGES) | _owners(fonts())):  # a font another package brought too
        (font_folder / f"{package}.copyright").write_text(licence(package) or "")
    written["fonts"] = len(fonts())
    return written


def write_licences(folder: Path, packages) -> None:
    """Each package's Debian copyright file, as LICENSE-PACKAGE.txt: images written from it carry their licence."""
    for package in packages:
        text = licence(package)
        if text is not None:
            (folder / f"LICENSE-{package}.txt").write_text(text)


def held_out_packages() -> list[str]:
    return [package for package, split in PHOTO_PACKAGES.items() if split == "heldout"]


def summary() -> dict:
    return {package: {"split": split, "images": len(photographs(package)), "licence_file": licence(package) is not None}
            for package, split in PHOTO_PACKAGES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="apt-get install the packages")
    parser.add_argument("--export", metavar="DIR", help="write the pictures, fonts and licences to DIR (for "
                        f"{EXPORTED}=DIR on a machine without the packages)")
    args = parser.parse_args()
    if args.install:  # run by a bare interpreter (CI) before the project's packages, Pillow among them
        install()
        return
    if args.export:
        print(json.dumps(export(Path(args.export))))
        return
    for package, row in summary().items():
        print(f"{package:30} {row['split']:8} {row['images']:3} images, licence "
              f"{licence_path(package) if row['licence_file'] else 'not installed'}")


if __name__ == "__main__":
    main()
