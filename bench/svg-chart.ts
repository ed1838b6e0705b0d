/** One line of a chart: its name, colour and points (x in seconds, y in the chart's unit). */
export interface Series {
  name: string;
  colour: string;
  points: { x: number; y: number }[];
}

/** One panel: a title, a y unit, and its lines on a shared x axis (seconds). */
export interface Panel {
  title: string;
  unit: string;
  series: Series[];
}

const WIDTH = 760;
const PANEL_HEIGHT = 220;
const MARGIN = { left: 64, right: 16, top: 28, bottom: 34 };

const escape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** A round step for about five ticks up to `max`. */
function step(max: number): number {
  const raw = max / 5;
  const magnitude = 10 ** Math.floor(Math.log10(raw || 1));
  return ([1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? raw) || 1;
}

/**
 * Panels stacked in one self-contained SVG (no script, no external font), each a line chart
 * from 0 with a labelled y axis, the x axis in seconds, and a legend.
 *
 * @example
 * const svg = lineChartsSvg('Sustained load', [{ title: 'calls/s', unit: 'calls/s', series: [{ name: 'all', colour: '#1f77b4', points }] }]);
 */
export function lineChartsSvg(title: string, panels: Panel[]): string {
  const height = 30 + panels.length * PANEL_HEIGHT;
  const xMax = Math.max(1, ...panels.flatMap((p) => p.series.flatMap((s) => s.points.map((pt) => pt.x))));
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="${WIDTH / 2}" y="18" text-anchor="middle" font-size="14">${escape(title)}</text>`,
  ];
  panels.forEach((panel, index) => {
    const top = 30 + index * PANEL_HEIGHT;
    const plotW = WIDTH - MARGIN.left - MARGIN.right;
    const plotH = PANEL_HEIGHT - MARGIN.top - MARGIN.bottom;
    const yMaxRaw = Math.max(0, ...panel.series.flatMap((s) => s.points.map((p) => p.y)).filter(Number.isFinite));
    const yStep = step(yMaxRaw * 1.1);
    const yMax = Math.max(yStep, Math.ceil((yMaxRaw * 1.1) / yStep) * yStep);
    const xStep = step(xMax);
    const x = (v: number) => MARGIN.left + (v / xMax) * plotW;
    const y = (v: number) => top + MARGIN.top + plotH - (v / yMax) * plotH;
    parts.push(`<text x="${MARGIN.left}" y="${top + 18}" font-size="12" font-weight="bold">${escape(panel.title)}</text>`);
    for (let v = 0; v <= yMax + 1e-9; v += yStep) {
      parts.push(`<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e5e5"/>`);
      parts.push(`<text x="${MARGIN.left - 6}" y="${y(v) + 4}" text-anchor="end">${Number(v.toPrecision(4))}</text>`);
    }
    for (let v = 0; v <= xMax + 1e-9; v += xStep) {
      parts.push(`<text x="${x(v)}" y="${top + MARGIN.top + plotH + 14}" text-anchor="middle">${Number(v.toPrecision(4))}</text>`);
    }
    parts.push(`<text x="${WIDTH - MARGIN.right}" y="${top + MARGIN.top + plotH + 28}" text-anchor="end">seconds</text>`);
    parts.push(
      `<text transform="translate(14 ${top + MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle">${escape(panel.unit)}</text>`,
      `<line x1="${MARGIN.left}" x2="${MARGIN.left}" y1="${top + MARGIN.top}" y2="${top + MARGIN.top + plotH}" stroke="#999"/>`,
      `<line x1="${MARGIN.left}" x2="${WIDTH - MARGIN.right}" y1="${top + MARGIN.top + plotH}" y2="${top + MARGIN.top + plotH}" stroke="#999"/>`,
    );
    panel.series.forEach((series, i) => {
      const points = series.points.filter((p) => Number.isFinite(p.y));
      if (points.length > 0)
        parts.push(
          `<polyline fill="none" stroke="${series.colour}" stroke-width="1.6" points="${points.map((p) => `${x(p.x).toFixed(1)},${y(p.y).toFixed(1)}`).join(' ')}"/>`,
        );
      const lx = WIDTH - MARGIN.right - 150;
      const ly = top + 14 + i * 13;
      parts.push(`<line x1="${lx}" x2="${lx + 18}" y1="${ly - 4}" y2="${ly - 4}" stroke="${series.colour}" stroke-width="2"/>`);
      parts.push(`<text x="${lx + 22}" y="${ly}">${escape(series.name)}</text>`);
    });
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
