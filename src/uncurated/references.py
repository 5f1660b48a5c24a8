"""The papers this package implements, in one place: their citations, BibTeX, and the short form text uses.

Docstrings, ``--help`` texts, the bench's claims and ``uncurated objectives`` cite a paper by its short form
("Wang et al. 2025, Table 1"); :func:`cite` builds it from a key of :data:`REFERENCES`, and each objective
names its papers' keys in its ``papers`` attribute. ``docs/references.md`` is written from this module
(``python scripts/write_references.py``), and a test keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    """One paper: ``key`` is its BibTeX key and its anchor in ``docs/references.md``."""

    key: str
    short: str
    authors: tuple[str, ...]
    title: str
    venue: str
    year: int
    entry_type: str = "inproceedings"
    booktitle: str = ""
    school: str = ""
    arxiv: str = ""
    code: str = ""
    label: str = ""
    used_in: str = ""

    def citation(self) -> str:
        """The full citation on one line: authors, title, venue and year, arXiv identifier."""
        if len(self.authors) == 1:
            names = self.authors[0]
        else:
            names = ", ".join(self.authors[:-1]) + " and " + self.authors[-1]
        text = f'{names}. "{self.title}." {self.venue}, {self.year}.'
        if self.arxiv:
            text += f" arXiv:{self.arxiv}."
        return text

    @property
    def arxiv_url(self) -> str:
        """The paper's arXiv page, or ``""``."""
        return f"https://arxiv.org/abs/{self.arxiv}" if self.arxiv else ""

    def bibtex(self) -> str:
        """The BibTeX entry."""
        fields = [("title", "{" + self.title + "}"), ("author", " and ".join(self.authors))]
        if self.entry_type == "inproceedings":
            fields.append(("booktitle", self.booktitle or self.venue))
        elif self.entry_type == "phdthesis":
            fields.append(("school", self.school))
        else:
            fields.append(("journal", self.venue))
        fields.append(("year", str(self.year)))
        if self.arxiv:
            fields += [("eprint", self.arxiv), ("archivePrefix", "arXiv"), ("url", self.arxiv_url)]
        body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
        return f"@{self.entry_type}{{{self.key},\n{body}\n}}"


_REFERENCES = (
    # The five papers whose methods, theory and claims this package is built on.
    Reference(
        "wang2025nuclr",
        "Wang et al. 2025",
        ("Bokun Wang", "Yunwen Lei", "Yiming Ying", "Tianbao Yang"),
        "On Discriminative Probabilistic Modeling for Self-Supervised Representation Learning",
        "ICLR",
        2025,
        booktitle="International Conference on Learning Representations (ICLR)",
        arxiv="2410.09156",
        code="https://github.com/bokun-wang/NUCLR",
        label="NUCLR",
        used_in="`uncurated toy nuclr`, `uncurated.theory.popularity`, the `cc3m-*` presets, the bench's NUCLR claims",
    ),
    Reference(
        "chuang2023thesis",
        "Chuang 2023",
        ("Ching-Yao Chuang",),
        "Robust Learning from Uncurated Data",
        "PhD thesis, Massachusetts Institute of Technology",
        2023,
        entry_type="phdthesis",
        school="Massachusetts Institute of Technology",
        label="the thesis",
        used_in="DCL, HCL and RINCE (Chapters 3-5), `uncurated toy dcl`, `uncurated.theory.kvariance` (Chapter 8), "
        "`uncurated.debias` (Chapter 7), the `thesis-two-view` preset, the bench's two-view claims",
    ),
    Reference(
        "uesaka2025wpse",
        "Uesaka et al. 2025",
        ("Toshimitsu Uesaka", "Taiji Suzuki", "Yuhta Takida", "Chieh-Hsin Lai", "Naoki Murata", "Yuki Mitsufuji"),
        "Weighted Point Set Embedding for Multimodal Contrastive Learning Toward Optimal Similarity Metric",
        "ICLR",
        2025,
        booktitle="International Conference on Learning Representations (ICLR)",
        arxiv="2404.19228",
        code="https://github.com/sony/wpse",
        label="WPSE",
        used_in="`uncurated.similarity`, `point_sets=true`, `uncurated toy wpse`, `uncurated.theory.pmi`, the "
        "`cc3m-wpse` preset, the bench's WPSE claim",
    ),
    Reference(
        "chen2024clip",
        "Chen et al. 2024",
        ("Zixiang Chen", "Yihe Deng", "Yuanzhi Li", "Quanquan Gu"),
        "Understanding Transferable Representation Learning and Zero-shot Transfer in CLIP",
        "ICLR",
        2024,
        booktitle="International Conference on Learning Representations (ICLR)",
        arxiv="2310.00927",
        label="CLIP's margins and the positive-pair regularizer",
        used_in="`uncurated toy clip-margin`, `uncurated.theory.margins`, the margins of `uncurated eval`, the "
        "bench's regularizer claims",
    ),
    Reference(
        "nozawa2021negatives",
        "Nozawa & Sato 2021",
        ("Kento Nozawa", "Issei Sato"),
        "Understanding Negative Samples in Instance Discriminative Self-supervised Representation Learning",
        "NeurIPS",
        2021,
        booktitle="Advances in Neural Information Processing Systems (NeurIPS)",
        arxiv="2102.06866",
        code="https://github.com/nzw0301/Understanding-Negative-Samples",
        label="negatives and the coupon collector",
        used_in="`uncurated bound`, `uncurated.theory.coupon`, `uncurated.theory.negatives_bound`, the mean classifier "
        "of `uncurated eval`, the bench's bound claim",
    ),
    # The other methods the package implements.
    Reference(
        "oord2018cpc",
        "van den Oord et al. 2018",
        ("Aaron van den Oord", "Yazhe Li", "Oriol Vinyals"),
        "Representation Learning with Contrastive Predictive Coding",
        "arXiv preprint",
        2018,
        entry_type="article",
        arxiv="1807.03748",
        label="InfoNCE",
    ),
    Reference(
        "chen2020simclr",
        "Chen et al. 2020",
        ("Ting Chen", "Simon Kornblith", "Mohammad Norouzi", "Geoffrey Hinton"),
        "A Simple Framework for Contrastive Learning of Visual Representations",
        "ICML",
        2020,
        booktitle="International Conference on Machine Learning (ICML)",
        arxiv="2002.05709",
        label="SimCLR, NT-Xent",
    ),
    Reference(
        "radford2021clip",
        "Radford et al. 2021",
        (
            "Alec Radford",
            "Jong Wook Kim",
            "Chris Hallacy",
            "Aditya Ramesh",
            "Gabriel Goh",
            "Sandhini Agarwal",
            "Girish Sastry",
            "Amanda Askell",
            "Pamela Mishkin",
            "Jack Clark",
            "Gretchen Krueger",
            "Ilya Sutskever",
        ),
        "Learning Transferable Visual Models From Natural Language Supervision",
        "ICML",
        2021,
        booktitle="International Conference on Machine Learning (ICML)",
        arxiv="2103.00020",
        label="CLIP",
    ),
    Reference(
        "zhai2023siglip",
        "Zhai et al. 2023",
        ("Xiaohua Zhai", "Basil Mustafa", "Alexander Kolesnikov", "Lucas Beyer"),
        "Sigmoid Loss for Language Image Pre-Training",
        "ICCV",
        2023,
        booktitle="IEEE/CVF International Conference on Computer Vision (ICCV)",
        arxiv="2303.15343",
        label="SigLIP",
    ),
    Reference(
        "goel2022cyclip",
        "Goel et al. 2022",
        ("Shashank Goel", "Hritik Bansal", "Sumit Bhatia", "Ryan A. Rossi", "Vishwa Vinay", "Aditya Grover"),
        "CyCLIP: Cyclic Contrastive Language-Image Pretraining",
        "NeurIPS",
        2022,
        booktitle="Advances in Neural Information Processing Systems (NeurIPS)",
        arxiv="2205.14459",
        label="CyCLIP",
    ),
    Reference(
        "chuang2020dcl",
        "Chuang et al. 2020",
        ("Ching-Yao Chuang", "Joshua Robinson", "Lin Yen-Chen", "Antonio Torralba", "Stefanie Jegelka"),
        "Debiased Contrastive Learning",
        "NeurIPS",
        2020,
        booktitle="Advances in Neural Information Processing Systems (NeurIPS)",
        arxiv="2007.00224",
        label="DCL",
    ),
    Reference(
        "robinson2021hcl",
        "Robinson et al. 2021",
        ("Joshua Robinson", "Ching-Yao Chuang", "Suvrit Sra", "Stefanie Jegelka"),
        "Contrastive Learning with Hard Negative Samples",
        "ICLR",
        2021,
        booktitle="International Conference on Learning Representations (ICLR)",
        arxiv="2010.04592",
        label="HCL",
    ),
    Reference(
        "chuang2022rince",
        "Chuang et al. 2022",
        (
            "Ching-Yao Chuang",
            "R Devon Hjelm",
            "Xin Wang",
            "Vibhav Vineet",
            "Neel Joshi",
            "Antonio Torralba",
            "Stefanie Jegelka",
            "Yale Song",
        ),
        "Robust Contrastive Learning against Noisy Views",
        "CVPR",
        2022,
        booktitle="IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)",
        arxiv="2201.04309",
        label="RINCE",
    ),
    Reference(
        "yuan2022sogclr",
        "Yuan et al. 2022",
        (
            "Zhuoning Yuan",
            "Yuexin Wu",
            "Zi-Hao Qiu",
            "Xianzhi Du",
            "Lijun Zhang",
            "Denny Zhou",
            "Tianbao Yang",
        ),
        "Provable Stochastic Optimization for Global Contrastive Learning: Small Batch Does Not Harm Performance",
        "ICML",
        2022,
        booktitle="International Conference on Machine Learning (ICML)",
        arxiv="2202.12387",
        label="SogCLR",
    ),
    Reference(
        "qiu2023isogclr",
        "Qiu et al. 2023",
        ("Zi-Hao Qiu", "Quanqi Hu", "Zhuoning Yuan", "Denny Zhou", "Lijun Zhang", "Tianbao Yang"),
        "Not All Semantics are Created Equal: Contrastive Self-supervised Learning with Automatic Temperature "
        "Individualization",
        "ICML",
        2023,
        booktitle="International Conference on Machine Learning (ICML)",
        arxiv="2305.11965",
        label="iSogCLR",
    ),
    Reference(
        "wei2024fastclip",
        "Wei et al. 2024",
        ("Xiyuan Wei", "Fanjiang Ye", "Ori Yonay", "Xingyu Chen", "Baixi Sun", "Dingwen Tao", "Tianbao Yang"),
        "FastCLIP: A Suite of Optimization Techniques to Accelerate CLIP Training with Limited Resources",
        "arXiv preprint",
        2024,
        entry_type="article",
        arxiv="2407.01445",
        label="FastCLIP",
        used_in='iSogCLR\'s `temperature_optimizer="fastclip"`',
    ),
    Reference(
        "chuang2023debiasing",
        "Chuang et al. 2023",
        ("Ching-Yao Chuang", "Varun Jampani", "Yuanzhen Li", "Antonio Torralba", "Stefanie Jegelka"),
        "Debiasing Vision-Language Models via Biased Prompts",
        "arXiv preprint",
        2023,
        entry_type="article",
        arxiv="2302.00070",
        label="calibrated projections (Chapter 7 of the thesis)",
        used_in="`uncurated debias`, `uncurated.debias`",
    ),
    Reference(
        "chuang2021kvmargin",
        "Chuang et al. 2021",
        ("Ching-Yao Chuang", "Youssef Mroueh", "Kristjan Greenewald", "Antonio Torralba", "Stefanie Jegelka"),
        "Measuring Generalization with Optimal Transport",
        "NeurIPS",
        2021,
        booktitle="Advances in Neural Information Processing Systems (NeurIPS)",
        arxiv="2106.03314",
        code="https://github.com/chingyaoc/kV-Margin",
        label="k-variance margins (Chapter 8 of the thesis)",
        used_in="`uncurated.theory.kvariance`, the kV margins of `uncurated eval`",
    ),
    Reference(
        "arora2019curl",
        "Arora et al. 2019",
        ("Sanjeev Arora", "Hrishikesh Khandeparkar", "Mikhail Khodak", "Orestis Plevrakis", "Nikunj Saunshi"),
        "A Theoretical Analysis of Contrastive Unsupervised Representation Learning",
        "ICML",
        2019,
        booktitle="International Conference on Machine Learning (ICML)",
        arxiv="1902.09229",
        label="the CURL bound",
        used_in="the bound `uncurated bound` compares against (Nozawa & Sato 2021, Eq. 8)",
    ),
)

#: Every reference by key, in the order ``docs/references.md`` lists them.
REFERENCES: dict[str, Reference] = {reference.key: reference for reference in _REFERENCES}

#: The five papers the package is built on (the rest are the other methods it implements).
CORE_PAPERS = ("wang2025nuclr", "chuang2023thesis", "uesaka2025wpse", "chen2024clip", "nozawa2021negatives")


def cite(key: str, where: str = "") -> str:
    """The short form of a citation, with a location in the paper: ``cite("wang2025nuclr", "Table 1")``."""
    if key not in REFERENCES:
        raise KeyError(f"unknown reference {key!r}; known: {', '.join(REFERENCES)}")
    short = REFERENCES[key].short
    return f"{short}, {where}" if where else short
