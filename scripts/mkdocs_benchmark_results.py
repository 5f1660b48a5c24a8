"""An mkdocs hook: the measured tables' JSON under benchmarks/results/ becomes part of the documentation site.

The pages link to it as ``../benchmarks/results/NAME`` so that the links work in the repository as they are;
the site holds the same files at ``benchmarks/results/NAME`` beside the pages, and every such link is checked
like any other (a missing file fails ``mkdocs build --strict``).
"""

from __future__ import annotations

import pathlib

from mkdocs.structure.files import File

RESULTS = "benchmarks/results"
LINK_FROM_PAGE = f"](../{RESULTS}/"


def on_files(files, config):
    repository = pathlib.Path(config["config_file_path"]).parent
    for path in sorted((repository / RESULTS).iterdir()):
        if path.is_file():
            files.append(
                File(f"{RESULTS}/{path.name}", str(repository), config["site_dir"], config["use_directory_urls"])
            )
    return files


def on_page_markdown(markdown, page, config, files):
    return markdown.replace(LINK_FROM_PAGE, f"]({RESULTS}/")
