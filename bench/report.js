// Renders bench rows as a Markdown table and an SVG bar chart of native/stock ratios.
const fmt = (ms) => (ms == null ? "n/a" : ms < 1 ? ms.toFixed(3) : ms.toFixed(1));
const mem = (m) => (m == null ? "" : `${m.toFixed(0)}`);

export function renderMarkdown(rows, machine, skipped) {
  const lines = [
    "# Benchmark results",
    "",
    "`npm run bench`: native operations against stock pi in one process run. Times are medians of many",
    "calls; ratio = native / stock (below 1 means native is faster; for throughput rows it is the ratio of",
    "times too). Peak memory is the peak RSS of a child process doing only that side's work.",
    "",
    `Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memGiB} GiB, ${machine.os}. ${machine.node}, ${machine.pi}, ${machine.rg}, ${machine.fd}. Run at ${machine.date}.`,
    "",
    "| capability | operation | corpus | native median (ms) | stock median (ms) | ratio | target | native peak MiB | stock peak MiB | note |",
    "|---|---|---|---:|---:|---:|---|---:|---:|---|",
  ];
  for (const r of rows) {
    const ratio = r.ratio == null ? "n/a" : `${r.ratio.toFixed(2)}×`;
    lines.push(
      `| ${r.capability} | ${r.operation} | ${r.corpus} | ${fmt(r.nativeMs)} | ${fmt(r.stockMs)} | ${ratio} | ${r.target ?? ""} | ${mem(r.nativeMemMiB)} | ${mem(r.stockMemMiB)} | ${r.note ?? ""} |`,
    );
  }
  if (skipped.length) lines.push("", "Skipped:", "", ...skipped.map((s) => `- ${s}`));
  lines.push(
    "",
    "![ratios](results.svg)",
    "",
    "How to read these rows, and why the missed targets miss: [NOTES.md](NOTES.md).",
    "",
  );
  return lines.join("\n");
}

/** Horizontal bars of native/stock per row on a log scale around 1×, green when faster. */
export function renderSvg(rows, machine) {
  const measured = rows.filter((r) => r.ratio != null);
  const rowH = 22;
  const left = 470;
  const width = 1000;
  const plotW = width - left - 80;
  const height = 60 + measured.length * rowH + 30;
  const lo = Math.log10(0.01);
  const hi = Math.log10(10);
  const x = (ratio) => left + ((Math.log10(Math.min(Math.max(ratio, 0.01), 10)) - lo) / (hi - lo)) * plotW;
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;");
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="15" font-weight="bold">pi-native-ops vs stock pi: time ratio native / stock (log scale)</text>`,
    `<text x="10" y="38" fill="#555">${esc(`left of 1× = native faster; black tick = target; green = target met. ${machine.cpu}, ${machine.cores} cores; ${machine.node}; ${machine.pi}`)}</text>`,
  ];
  for (const t of [0.01, 0.1, 0.3, 1, 3, 10]) {
    parts.push(`<line x1="${x(t)}" y1="50" x2="${x(t)}" y2="${height - 25}" stroke="${t === 1 ? "#000" : "#ddd"}"/>`);
    parts.push(`<text x="${x(t)}" y="${height - 10}" text-anchor="middle" fill="#555">${t}×</text>`);
  }
  measured.forEach((r, i) => {
    const y = 55 + i * rowH;
    const x0 = x(1);
    const x1 = x(r.ratio);
    // Green when the row meets its target ratio (or, without one, when native is faster).
    // The time-ratio part of the target ("≤ 0.9×", or the last part of "≤ 20 ms, ≤ 0.1×").
    const target = /(?:^|, )≤ ([\d.]+)×$/.exec(r.target ?? "");
    const color = r.ratio <= (target ? Number(target[1]) : 1) ? "#2e9d4b" : "#d9534f";
    const label = r.operation.startsWith(r.capability) ? r.operation : `${r.capability}: ${r.operation}`;
    parts.push(`<text x="${left - 8}" y="${y + 14}" text-anchor="end">${esc(`${label} [${r.corpus}]`)}</text>`);
    parts.push(
      `<rect x="${Math.min(x0, x1)}" y="${y + 3}" width="${Math.max(1, Math.abs(x1 - x0))}" height="${rowH - 8}" fill="${color}"/>`,
    );
    parts.push(`<text x="${Math.max(x0, x1) + 4}" y="${y + 14}" fill="#333">${r.ratio.toFixed(2)}×</text>`);
    // The row's target, when it is a time ratio ("≤ 0.9×"), as a black tick.
    if (target)
      parts.push(
        `<line x1="${x(Number(target[1]))}" y1="${y + 1}" x2="${x(Number(target[1]))}" y2="${y + rowH - 3}" stroke="#000" stroke-width="2"/>`,
      );
  });
  parts.push("</svg>");
  return parts.join("\n");
}
