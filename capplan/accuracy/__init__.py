"""The validation corpus and the accuracy of capplan's predictions against it.

``validation/*.csv`` ship published measurements, one per row, each with its citation;
:func:`run_accuracy` predicts every row with capplan and reports the signed and absolute error
per row and summarised per source, metric and hardware (``capplan accuracy``). Which rows
fitted the engine profiles and which were held out to test them is ``validation/split.yaml``.
"""

from capplan.accuracy.corpus import CorpusRow, load_corpus
from capplan.accuracy.report import AccuracyReport, RowResult, run_accuracy, summarize

__all__ = ["CorpusRow", "load_corpus", "AccuracyReport", "RowResult", "run_accuracy", "summarize"]
