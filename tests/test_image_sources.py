"""Photographs from Debian's wallpaper packages (core/world/image_sources.py): one whole package held out, one image
per picture, licences beside what is written from them. Skips where the packages are not installed
(`python -m core.world.image_sources --install`; CI installs them).

    python -m pytest -q tests/test_image_sources.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.world import image_sources, mix, photographs, photos

installed = all(image_sources.photographs(p) for p in image_sources.PHOTO_PACKAGES)
needs_packages = pytest.mark.skipif(not installed, reason="python -m core.world.image_sources --install")


def test_one_package_is_held_out_whole():
    splits = list(image_sources.PHOTO_PACKAGES.values())
    assert splits.count("heldout") == 1 and set(splits) == {"train", "heldout"}


@needs_packages
def test_the_splits_share_no_photograph_and_each_picture_counts_once():
    train, heldout = image_sources.split_photographs("train"), image_sources.split_photographs("heldout")
    assert train and heldout and not set(train) & set(heldout)
    # Plasma ships each wallpaper at many resolutions: one of them stands for the picture (its dark variant is another).
    plasma = image_sources.photographs("plasma-workspace-wallpapers")
    pictures = [(Path(p).parents[2].name, Path(p).parent.name) for p in plasma if "/contents/" in p]
    assert len(pictures) == len(set(pictures))
    image = image_sources.load(heldout[0])
    assert image.mode == "RGB" and max(image.size) <= image_sources.LONGEST_SIDE


@needs_packages
def test_wallpaper_samples_draw_only_from_their_split():
    import random

    for seed in range(6):
        image, name = photographs.wallpaper(random.Random(seed), "heldout")
        assert name in {Path(p).name for p in image_sources.split_photographs("heldout")}
        image, name = photographs.wallpaper(random.Random(seed), "train")
        assert name in {Path(p).name for p in image_sources.split_photographs("train")}
        assert photographs.photo(random.Random(seed), "heldout", from_wallpapers=True).mode == "RGB"


@needs_packages
def test_heldout_views_carry_their_licence(tmp_path):
    paths = photos.write_heldout_views(str(tmp_path), 3, "wallpaper")
    assert [Path(p).name for p in paths] == ["wallpaper000.png", "wallpaper001.png", "wallpaper002.png"]
    assert Image.open(paths[0]).tobytes() == photos.sample("heldout", 0, "layout", "wallpaper").image.tobytes()
    held = [p for p, split in image_sources.PHOTO_PACKAGES.items() if split == "heldout"]
    assert [f.name for f in tmp_path.glob("LICENSE-*.txt")] == [f"LICENSE-{held[0]}.txt"]


@needs_packages
def test_heldout_wallpapers_are_written_whole(tmp_path):
    paths = photos.write_heldout_photos(str(tmp_path), "wallpaper")
    assert len(paths) == len(image_sources.split_photographs("heldout"))
    assert all(max(Image.open(p).size) <= image_sources.LONGEST_SIDE for p in paths)
    assert (tmp_path / "LICENSE-ukui-wallpapers.txt").read_text().startswith(("Format:", "This package"))


def test_a_picture_counts_once_whatever_its_resolutions_and_overlays_are_left_out(tmp_path, monkeypatch):
    # MATE ships NAME.jpg beside NAME_3840x2160.jpg; an overlay's transparent pixels take the desktop's colour.
    for name, size in [("Sky.jpg", (64, 40)), ("Sky_3840x2160.jpg", (96, 54)), ("Leaf_1024x640.jpg", (64, 40)),
                       ("Leaf_2560x1600.jpg", (96, 60))]:
        Image.new("RGB", size, "blue").save(tmp_path / name)
    Image.new("RGBA", (32, 32), (9, 9, 9, 255)).save(tmp_path / "Opaque.png")
    overlay = Image.new("RGBA", (32, 32), (255, 255, 255, 0))
    overlay.putpixel((3, 3), (255, 255, 255, 200))
    overlay.save(tmp_path / "Overlay.png")
    monkeypatch.setattr(image_sources, "_package_files", lambda package: sorted(tmp_path.iterdir()))
    found = [Path(p).name for p in image_sources.photographs.__wrapped__("any")]
    assert found == ["Leaf_2560x1600.jpg", "Opaque.png", "Sky.jpg"]


def test_install_runs_before_pillow_is_there():
    """CI runs `--install` with the machine's bare interpreter, before the project's packages (Pillow) are in: -S
    leaves site-packages out, and Pillow is kept out even where the interpreter's own library holds it."""
    script = ("import sys; sys.modules['PIL'] = None\n"  # `import PIL` now raises ImportError
              "import core.world.image_sources as sources\n"
              "sources.install = lambda: print('installed')\n"
              "sys.argv = ['image_sources', '--install']\n"
              "sources.main()\n")
    ran = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "installed"


@pytest.fixture
def cleared_caches():
    """photographs() and fonts() are cached per process: cleared around a test that points them elsewhere."""
    caches = (image_sources.photographs, image_sources.fonts)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


@needs_packages
def test_an_exported_folder_draws_what_the_packages_draw(tmp_path, monkeypatch, cleared_caches):
    """`--export` writes every picture, font and licence; a machine that names the folder (a GPU box without Debian's
    archive) draws the same samples: the same pictures by the same names (PHOTOS_WITH_TEXT matches), the same fonts
    in the same order, the pixels within JPEG's rounding."""
    own = mix.tasks("world,photos", "photos")
    indices = [(split, 6_000_000 + 7 * i) for split in ("train", "heldout") for i in range(18)]
    before = [mix.sample(split, i, own[i % len(own)]) for split, i in indices]
    installed = {package: image_sources.photographs(package) for package in image_sources.PHOTO_PACKAGES}
    fonts = image_sources.fonts()
    written = image_sources.export(tmp_path)
    assert written == {**{package: len(paths) for package, paths in installed.items()}, "fonts": len(fonts)}

    monkeypatch.setenv(image_sources.EXPORTED, str(tmp_path))
    image_sources.photographs.cache_clear()
    image_sources.fonts.cache_clear()
    for package, paths in installed.items():
        copies = image_sources.photographs(package)
        assert [image_sources.picture_name(p) for p in copies] == [Path(p).name for p in paths]
        assert image_sources.licence(package) == (Path("/usr/share/doc") / package / "copyright").read_text()
    assert [Path(f).name.split("-", 1)[1] for f in image_sources.fonts()] == [Path(f).name for f in fonts]
    after = [mix.sample(split, i, own[i % len(own)]) for split, i in indices]
    assert [(s.prompt, s.answer) for s in after] == [(s.prompt, s.answer) for s in before]
    for a, b in zip(before, after):
        assert a.image.size == b.image.size
        assert np.abs(np.asarray(a.image, float) - np.asarray(b.image, float)).mean() < 3
    with pytest.raises(ValueError, match="not from another export"):
        image_sources.export(tmp_path / "again")
