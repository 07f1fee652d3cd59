// The HTML twin of every lab report: saved next to the .txt, with the same sections, opening from
// the file with nothing to fetch, and every character of the report escaped, so a value holding
// markup shows as text and never runs.
//
// Needs `npm run build` first (`npm test` does it).

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { renderHtmlReport } from "../../src/lab/html-report.js";
import { requireBuiltCli, runCli } from "../support/cli.js";
import { tempDir } from "../support/temp.js";

beforeAll(requireBuiltCli);

/** The text of an HTML fragment, tags removed and entities decoded (enough for these reports). */
function textOf(html: string): string {
  return html
    .replace(/<[^>]+>/g, "")
    .replaceAll("&lt;", "<")
    .replaceAll("&gt;", ">")
    .replaceAll("&quot;", '"')
    .replaceAll("&#39;", "'")
    .replaceAll("&amp;", "&");
}

describe("the HTML lab report", () => {
  it("escapes markup in a report, and loads nothing: no script, no external address, a policy forbidding any", () => {
    const text =
      'run started   now\n\n== PAYLOADS ===\nnote: <script>alert("x")</script> & <img src=x onerror=alert(1)>\n\n== VERDICT ===\nresult        PASSED: 1 of 1 checks passed\n';
    const html = renderHtmlReport(text, "demo <b>bold</b>");
    expect(html).not.toMatch(/<script|<img|<b>/i); // as text only, escaped
    expect(html).toContain("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt;");
    expect(html).toContain(`<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">`);
    expect(html).not.toMatch(/https?:\/\/|\bsrc=["']|\bhref=/i);
    expect(html).toContain("<h2>PAYLOADS</h2>");
    expect(html).toContain('<span class="verdict-passed">PASSED</span>');
  });

  it("is saved next to each text report of a lab run, with the same sections and the same text", async () => {
    const reports = tempDir("wassal-html-report-");
    const run = await runCli(["lab", "all", "--reports", reports], { cwd: reports, timeoutMs: 120_000 });
    expect(run.code, run.stderr).toBe(0);
    const folders = readdirSync(join(reports, "Reports"));
    const texts = folders.flatMap((folder) =>
      readdirSync(join(reports, "Reports", folder))
        .filter((f) => f.endsWith(".txt"))
        .map((f) => join(reports, "Reports", folder, f)),
    );
    expect(texts.length).toBeGreaterThanOrEqual(4);
    for (const txt of texts) {
      const text = readFileSync(txt, "utf8");
      const html = readFileSync(txt.replace(/\.txt$/, ".html"), "utf8");
      const headings = [...text.matchAll(/^== (.+?) =+$/gm)].map((m) => m[1]);
      const h2 = [...html.matchAll(/<h2>(.*?)<\/h2>/g)].map((m) => textOf(m[1] ?? ""));
      expect(h2, txt).toEqual(headings);
      // Every non-blank line of the text report is in the page, in order.
      const page = textOf(html);
      let at = 0;
      for (const line of text.split("\n").filter((l) => l.trim() !== "" && !/^== .+ =+$/.test(l))) {
        const found = page.indexOf(line, at);
        expect(found, `${txt}: ${line}`).toBeGreaterThanOrEqual(0);
        at = found + line.length;
      }
      expect(html).toMatch(/<title>.*: PASSED<\/title>/);
    }
    // The leasing scenario draws its lease-expiry demonstration as a timeline (times of day, on the scenario clock).
    const leasing = texts.find((p) => /Session-15-Outbox-Leasing-/.test(p));
    const page = readFileSync(leasing!.replace(/\.txt$/, ".html"), "utf8");
    const time = (iso: string) => iso.slice(11, 23);
    const leases = [...page.matchAll(/data-owner="([^"]*)" data-token="(\d+)" data-from="([^"]+)" data-to="([^"]+)" data-end="(\w+)"/g)].map((m) => [
      m[1],
      Number(m[2]),
      time(m[3]!),
      time(m[4]!),
      m[5],
    ]);
    expect(leases).toEqual([
      ["Worker-A", 1, "09:00:00.000", "09:00:00.500", "expired"],
      ["Worker-B", 2, "09:00:00.600", "09:00:00.600", "completed"],
    ]);
    const marks = [...page.matchAll(/data-kind="(\w+)" data-at="([^"]+)" data-owner="([^"]*)"/g)].map((m) => [m[1], time(m[2]!), m[3]]);
    expect(marks).toEqual([
      ["blocked", "09:00:00.000", "Worker-B"],
      ["crash", "09:00:00.000", "Worker-A"],
      ["refused", "09:00:00.600", "Worker-A"],
      ["clock", "09:00:00.600", ""],
    ]);
    expect(page.indexOf("<svg")).toBeGreaterThan(page.indexOf("<h2>Lease-expiry demonstration (PAY-001, scenario clock)</h2>"));
  });
});
