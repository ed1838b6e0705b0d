/**
 * A data analysis as people write it with `@e2b/code-interpreter`, unchanged but for where it
 * points: upload a CSV, summarise it with pandas, draw a bar chart with matplotlib, and read the
 * chart's data back from the result. Run: `node examples/run.mjs e2b-data-analysis` (needs a running
 * Warren: `scripts/start`; set E2B_API_KEY to its API key and E2B_API_URL and E2B_SANDBOX_URL to
 * its address plus `/e2b`, see docs/e2b.md).
 */
import { Sandbox } from '@e2b/code-interpreter';

const SALES = `month,region,revenue
Jan,north,120
Jan,south,95
Feb,north,135
Feb,south,110
Mar,north,160
Mar,south,128
`;

const ANALYSIS = `
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("sales.csv")
totals = df.groupby("month", sort=False)["revenue"].sum()
print(f"best month: {totals.idxmax()} ({totals.max()})")

fig, ax = plt.subplots()
ax.bar(totals.index, totals.values)
ax.set_title("Revenue by month")
ax.set_xlabel("month")
ax.set_ylabel("revenue")
plt.show()
`;

/** What the analysis found: its printed summary, and the chart as E2B's SDK gives it. */
export interface Analysis {
  summary: string;
  chart: { type: string; title: string; bars: { label: string; value: number }[] };
  /** Whether the figure also came back as a PNG. */
  png: boolean;
}

/** Runs the analysis in a new sandbox of the SDK's default template, and kills it after. */
export async function main(options: { apiKey?: string; apiUrl?: string; sandboxUrl?: string } = {}): Promise<Analysis> {
  const sandbox = await Sandbox.create(options);
  try {
    await sandbox.files.write('sales.csv', SALES);
    const execution = await sandbox.runCode(ANALYSIS);
    if (execution.error) throw new Error(`${execution.error.name}: ${execution.error.value}`);
    const figure = execution.results.find((r) => r.chart !== undefined);
    const chart = figure?.chart as { type: string; title: string; elements: { label: string; value: number }[] } | undefined;
    if (!figure || !chart) throw new Error('The analysis drew no chart.');
    const analysis: Analysis = {
      summary: execution.logs.stdout.join('').trim(),
      chart: { type: chart.type, title: chart.title, bars: chart.elements.map((e) => ({ label: e.label, value: e.value })) },
      png: typeof figure.png === 'string' && figure.png.length > 0,
    };
    console.log(JSON.stringify(analysis, null, 2));
    return analysis;
  } finally {
    await sandbox.kill();
  }
}
