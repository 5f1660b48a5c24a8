"""A report written once as a list of blocks (headings, paragraphs, tables, preformatted text, images) and
rendered twice, as Markdown and as a self-contained HTML page (images inlined), so the two always say the same."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from .claims import NO_VERDICT


class Document:
    """Blocks of a report, rendered as Markdown or HTML."""

    def __init__(self) -> None:
        self.blocks: list[tuple] = []

    def heading(self, level: int, text: str) -> None:
        self.blocks.append(("h", level, text))

    def paragraph(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        self.blocks.append(("table", header, rows))

    def pre(self, text: str) -> None:
        self.blocks.append(("pre", text))

    def image(self, path: Path | None, caption: str) -> None:
        """The figure at ``path`` with its caption; nothing when it was not drawn (``None``, or no such file)."""
        if path and Path(path).is_file():
            self.blocks.append(("img", Path(path), caption))

    def markdown(self, base: Path) -> str:
        out = []
        for block in self.blocks:
            kind = block[0]
            if kind == "h":
                out.append("#" * block[1] + " " + block[2])
            elif kind == "p":
                out.append(block[1])
            elif kind == "table":
                header, rows = block[1], block[2]
                out.append("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
                out[-1] += "".join("\n| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows)
            elif kind == "pre":
                out.append("```text\n" + block[1] + "\n```")
            elif kind == "img":
                out.append(f"![{block[2]}]({_relative(block[1], base)})\n\n*{block[2]}*")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        out = [
            f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
            _STYLE,
            "</head><body>",
        ]
        for block in self.blocks:
            kind = block[0]
            if kind == "h":
                out.append(f"<h{block[1]}>{html.escape(block[2])}</h{block[1]}>")
            elif kind == "p":
                out.append(f"<p>{_inline(block[1])}</p>")
            elif kind == "table":
                header, rows = block[1], block[2]
                out.append(
                    "<table><thead><tr>"
                    + "".join(f"<th>{html.escape(c)}</th>" for c in header)
                    + "</tr></thead><tbody>"
                )
                for row in rows:
                    cells = "".join(f"<td class='{_verdict_class(c)}'>{_inline(c)}</td>" for c in row)
                    out.append(f"<tr>{cells}</tr>")
                out.append("</tbody></table>")
            elif kind == "pre":
                out.append(f"<pre>{html.escape(block[1])}</pre>")
            elif kind == "img":
                data = base64.b64encode(block[1].read_bytes()).decode("ascii")
                out.append(
                    f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(block[2])}'>"
                    f"<figcaption>{html.escape(block[2])}</figcaption></figure>"
                )
        out.append("</body></html>")
        return "\n".join(out) + "\n"


_STYLE = """<style>
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; line-height: 1.4; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #eee; }
td.held { background: #d9f2d9; } td.reversed { background: #f7d4d4; } td.notsig { background: #f4f0d0; }
td.noverdict { background: #e8e8e8; color: #555; } td.absent { background: #dde6f7; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; }
code { background: #f0f0f0; }
</style>"""


def _verdict_class(cell: str) -> str:
    if cell.startswith(NO_VERDICT):
        return "noverdict"
    return {"held": "held", "reversed": "reversed", "absent": "absent", "inconclusive": "notsig"}.get(cell, "")


def _inline(text: str) -> str:
    escaped = html.escape(text)
    parts = escaped.split("`")
    return "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))


def _relative(path: Path, base: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)
