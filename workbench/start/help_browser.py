"""Help ▸ Documentation: README.md and docs/*.md, which ship with the project, rendered as
markdown in a QTextBrowser (Qt's own markdown reader), with Back and Forward.

The docs name each other in prose ("(docs/run-directory.md)"), not as markdown links, so
each file is read through `linked_docs`, which makes every name of a shipped doc a link;
a clicked link to a doc opens it here, a web link in the system's browser. Screenshots
are drawn at the pane's width (at most `MAX_IMAGE_WIDTH`), so the page never scrolls sideways.
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QUrl, Qt
from PySide6.QtGui import QImage, QTextDocument
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from workbench.setup.checks import REPO_ROOT

MAX_IMAGE_WIDTH = 900  # px: a screenshot's width at most, and the pane's
# A doc's name in prose or in a code span (`docs/gpu.md`), not already a link's text or
# target, nor part of a longer path (bench/README.md).
DOC_NAME = re.compile(r"(?<![\w/.\-\[`])(?<!\]\()(`?)((?:docs/)?[\w-]+\.md)\1(?![\w/]|\]\()")


def shipped_docs(root: Path = REPO_ROOT) -> list[Path]:
    """README.md, then docs/*.md by name."""
    readme = [root / "README.md"] if (root / "README.md").is_file() else []
    return readme + sorted((root / "docs").glob("*.md"))


def doc_title(path: Path) -> str:
    """A doc's first `# ` heading, else its file name."""
    try:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("# "):
                    return line[2:].strip()
    except OSError:
        pass
    return path.name


def linked_docs(text: str, here: Path, root: Path = REPO_ROOT) -> str:
    """`text` (markdown of the doc at `here`) with each name of a doc that exists
    (`docs/x.md` from the project's root, or `x.md` beside `here`) made a link to its
    file; fenced code blocks are left as they are.

    >>> import tempfile; root = Path(tempfile.mkdtemp()); (root / "docs").mkdir()
    >>> _ = (root / "docs" / "gpu.md").write_text("# GPU"); _ = (root / "README.md").write_text("# R")
    >>> print(linked_docs("see docs/gpu.md, `README.md` (gpu.md)", root / "docs" / "x.md", root))  # doctest: +ELLIPSIS
    see [docs/gpu.md](file:///.../docs/gpu.md), [`README.md`](file:///.../README.md) ([gpu.md](file:///.../docs/gpu.md))
    >>> linked_docs("bench/README.md, docs/none.md", root / "README.md", root)
    'bench/README.md, docs/none.md'
    >>> linked_docs("```\\ndocs/gpu.md\\n```\\n[docs/gpu.md](docs/gpu.md)", root / "README.md", root)
    '```\\ndocs/gpu.md\\n```\\n[docs/gpu.md](docs/gpu.md)'
    """
    def link(match: re.Match) -> str:
        name = match.group(2)
        for candidate in (root / name, here.parent / name):
            if candidate.is_file():
                return f"[{match.group(0)}]({QUrl.fromLocalFile(str(candidate.resolve())).toString()})"
        return match.group(0)

    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append(line if fenced or line.lstrip().startswith("```") else DOC_NAME.sub(link, line))
    return "\n".join(out)


class DocBrowser(QTextBrowser):
    """A QTextBrowser that reads a markdown file through `linked_docs` and fits wide images."""

    def loadResource(self, kind: int, name: QUrl):  # noqa: N802 (Qt's name)
        path = Path(name.toLocalFile()) if name.isLocalFile() else None
        if kind == QTextDocument.MarkdownResource and path is not None:
            try:
                return linked_docs(path.read_text(encoding="utf-8"), path)
            except (OSError, UnicodeDecodeError) as exc:
                return f"**{path} cannot be read** ({getattr(exc, 'strerror', None) or exc})"
        data = super().loadResource(kind, name)
        if kind == QTextDocument.ImageResource and data is not None:
            image = data if isinstance(data, QImage) else QImage.fromData(data)
            width = max(200, min(MAX_IMAGE_WIDTH, self.viewport().width() - 30))  # no sideways scrolling
            if not image.isNull() and image.width() > width:
                return image.scaledToWidth(width, Qt.SmoothTransformation)
        return data


class HelpBrowser(QDialog):
    """The docs: a list of them on the left, the one chosen on the right. Not modal."""

    def __init__(self, parent: QWidget | None = None, docs: list[Path] | None = None):
        super().__init__(parent)
        self.setWindowTitle("RL Workbench documentation")
        self.setObjectName("help-browser")
        self.docs = docs if docs is not None else shipped_docs()
        self.index = QListWidget()
        self.index.setObjectName("doc-index")
        for path in self.docs:
            item = QListWidgetItem(doc_title(path))
            item.setToolTip(str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path))
            item.setData(Qt.UserRole, str(path))
            self.index.addItem(item)
        self.browser = DocBrowser()
        self.browser.setObjectName("doc-view")
        self.browser.setOpenExternalLinks(True)  # web links: the system's browser; file links: here
        self.back = QPushButton("◀ Back")
        self.forward = QPushButton("Forward ▶")
        self.back.setEnabled(False)
        self.forward.setEnabled(False)
        self.back.clicked.connect(self.browser.backward)
        self.forward.clicked.connect(self.browser.forward)
        self.browser.backwardAvailable.connect(self.back.setEnabled)
        self.browser.forwardAvailable.connect(self.forward.setEnabled)
        self.browser.sourceChanged.connect(self._source_changed)
        self.index.currentItemChanged.connect(self._picked)

        right = QWidget()
        column = QVBoxLayout(right)
        column.setContentsMargins(0, 0, 0, 0)
        buttons = QHBoxLayout()
        buttons.addWidget(self.back)
        buttons.addWidget(self.forward)
        buttons.addStretch(1)
        column.addLayout(buttons)
        column.addWidget(self.browser, 1)
        splitter = QSplitter()
        splitter.addWidget(self.index)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 740])
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)
        self.resize(1000, 720)
        if self.docs:
            self.index.setCurrentRow(0)

    def open_doc(self, path: Path) -> None:
        """Show the doc at `path` (its index entry selected)."""
        url = QUrl.fromLocalFile(str(Path(path).resolve()))
        if self.browser.source() != url:
            self.browser.setSource(url, QTextDocument.MarkdownResource)

    @property
    def current(self) -> Path | None:
        source = self.browser.source()
        return Path(source.toLocalFile()) if source.isLocalFile() else None

    def _picked(self, item: QListWidgetItem | None, _previous=None) -> None:
        if item is not None:
            self.open_doc(Path(item.data(Qt.UserRole)))

    def _source_changed(self, url: QUrl) -> None:
        """Keep the index on the doc shown (a followed link, Back, Forward)."""
        shown = Path(url.toLocalFile()).resolve() if url.isLocalFile() else None
        for row in range(self.index.count()):
            if Path(self.index.item(row).data(Qt.UserRole)).resolve() == shown:
                self.index.blockSignals(True)
                self.index.setCurrentRow(row)
                self.index.blockSignals(False)
                return
