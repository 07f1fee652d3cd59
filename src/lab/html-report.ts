// The HTML twin of a lab report: the same text, its sections as headed blocks, in one file that
// opens from disk, with the scenario's timelines drawn (inline SVG) below their sections. It loads
// nothing (no script, no font, no image, and a content security policy that forbids any), and
// escapes every character of the report, so a value holding markup shows as text.

import { escapeHtml } from "../observability/escape-html.js";
import { renderTimelineSvg, timelineLegend } from "../observability/timeline.js";
import type { ReportFigure } from "./scenario.js";

const HEADING = /^== (.+?) =+$/;

interface Section {
  readonly title: string | null;
  readonly lines: string[];
}

/** Splits a text report at its `== TITLE ===` headings (see text-table.ts). */
function sections(text: string): Section[] {
  const found: Section[] = [{ title: null, lines: [] }];
  for (const line of text.replace(/\n$/, "").split("\n")) {
    const heading = HEADING.exec(line);
    if (heading?.[1] !== undefined) found.push({ title: heading[1], lines: [] });
    else found.at(-1)?.lines.push(line);
  }
  return found.filter((s) => s.title !== null || s.lines.some((l) => l.trim() !== ""));
}

const trimBlank = (lines: readonly string[]): string => lines.join("\n").replace(/^\n+|\n+$/g, "");

const STYLE = `
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 78rem; padding: 0 1rem; color: #1d2430; background: #fbfbfd; }
h1 { font-size: 1.4rem; margin: 0 0 1rem; }
h2 { font-size: 1rem; margin: 1.6rem 0 .4rem; padding-bottom: .2rem; border-bottom: 1px solid #d7dbe3; }
pre { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; background: #fff; border: 1px solid #e3e6ec; border-radius: 6px; padding: .8rem 1rem; overflow-x: auto; white-space: pre; }
.verdict-passed { color: #0b6b2e; font-weight: 600; }
.verdict-failed { color: #a4161a; font-weight: 600; }
figure { margin: .6rem 0 0; background: #fff; border: 1px solid #e3e6ec; border-radius: 6px; padding: .6rem .8rem; overflow-x: auto; }
figcaption { font-size: .9rem; color: #3b4452; margin-bottom: .4rem; }
.timeline-legend { font-size: .8rem; color: #5b6472; margin: .4rem 0 0; }
`;

function renderFigure(figure: ReportFigure): string {
  return `<figure class="report-timeline"><figcaption>${escapeHtml(figure.caption)}</figcaption>${renderTimelineSvg(figure.timeline)}${timelineLegend()}</figure>`;
}

/** A complete, self-contained HTML document of the report `text`, titled `title`, with `figures` drawn below their sections. */
export function renderHtmlReport(text: string, title: string, figures: readonly ReportFigure[] = []): string {
  const body = sections(text)
    .map((section) => {
      const drawn = figures
        .filter((f) => f.section === section.title)
        .map(renderFigure)
        .join("");
      const content = escapeHtml(trimBlank(section.lines)).replace(
        /^(result +)(PASSED|FAILED)(.*)$/m,
        (_, label: string, verdict: string, rest: string) => `${label}<span class="verdict-${verdict.toLowerCase()}">${verdict}</span>${rest}`,
      );
      return section.title === null
        ? `<section><pre>${content}</pre></section>`
        : `<section><h2>${escapeHtml(section.title)}</h2><pre>${content}</pre>${drawn}</section>`;
    })
    .join("\n");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>${escapeHtml(title)}</title>
<style>${STYLE}</style>
</head>
<body>
<h1>${escapeHtml(title)}</h1>
${body}
</body>
</html>
`;
}
