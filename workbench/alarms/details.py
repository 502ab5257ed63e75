"""The selected alarm in words and numbers: what it saw, why it matters, what to try
(each preset field in bold with its advice) and the evidence, a table of the values it
is based on (a row per step, a column per metric)."""

from __future__ import annotations

import html

from PySide6.QtWidgets import QTextBrowser

from workbench.alarms.model import Alarm, evidence_table


def _value(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def details_html(alarm: Alarm) -> str:
    e = html.escape
    parts = [f"<p style='margin:0'><span style='color:{alarm.colour}; font-size:15px'><b>⚠ {e(alarm.title)}</b></span>"
             f"<br><span style='color:#5f6368'>at step {alarm.step} · evidence from {e(alarm.steps_text)}"
             + (f" · about <code>{e(alarm.metric)}</code>" if alarm.metric else "") + "</span></p>"]
    if alarm.saw:
        parts.append(f"<p><b>What it saw</b><br>{e(alarm.saw)}</p>")
    if alarm.why:
        parts.append(f"<p><b>Why it matters</b><br>{e(alarm.why)}</p>")
    if alarm.tries:
        items = "".join(f"<li><b>{e(name)}</b>{': ' + e(advice) if advice else ''}</li>" for name, advice in alarm.tries)
        parts.append(f"<p><b>What to try</b></p><ul style='margin-top:0'>{items}</ul>")
    names, rows = evidence_table(alarm)
    if rows:
        cell = "style='padding:1px 8px; text-align:right'"
        head = f"<th {cell}>step</th>" + "".join(f"<th {cell}>{e(n)}</th>" for n in names)
        body = "".join(f"<tr><td {cell}>{step}</td>" + "".join(f"<td {cell}>{_value(v)}</td>" for v in values)
                       + "</tr>" for step, values in rows)
        parts.append(f"<p><b>Evidence</b></p><table cellspacing='0' border='1' style='border-collapse:collapse; "
                     f"border-color:#ddd'><tr>{head}</tr>{body}</table>")
    parts += [_samples_html(label, step, rows) for label, step, rows in alarm.samples if rows]
    return "".join(parts)


def _samples_html(label: str, step: int, rows: list[tuple[str, str, float | None]]) -> str:
    """Held-out samples from one side of the change: what the reward was paid for."""
    e = html.escape
    cell = "style='padding:1px 8px'"
    body = "".join(f"<tr><td {cell}><code>{e(prompt)}</code></td><td {cell}><code>{e(completion)}</code></td>"
                   f"<td {cell} align='right'>{_value(reward)}</td></tr>" for prompt, completion, reward in rows)
    return (f"<p><b>Samples {label} (step {step})</b></p><table cellspacing='0' border='1' "
            f"style='border-collapse:collapse; border-color:#ddd'><tr><th {cell}>prompt</th><th {cell}>completion"
            f"</th><th {cell}>reward</th></tr>{body}</table>")


class AlarmDetails(QTextBrowser):
    """The selected alarm (or a word on what the panel shows when none is)."""

    PLACEHOLDER = ("The engine watches its own metrics for runs that stop learning or go wrong (no learning "
                   "signal, KL spikes, entropy collapse, length drift, reward hacking, a falling held-out score, "
                   "a reward model exploited, non-finite steps) and raises an alarm here, with the numbers and what "
                   "to try.")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("alarm-details")
        self.setOpenLinks(False)
        self.setPlaceholderText(self.PLACEHOLDER)
        self.alarm: Alarm | None = None

    def show_alarm(self, alarm: Alarm | None) -> None:
        self.alarm = alarm
        if alarm is None:
            self.clear()
        else:
            self.setHtml(details_html(alarm))
