/**
 * A setup step as people write it with the `e2b` SDK: `sudo apt-get install` a tool the template
 * lacks, then use it. Warren runs it where the operator gave the key's tenant root sandboxes
 * (`allowRoot`) on an engine that keeps a container's root from being the host's
 * (docs/security.md#root-sandboxes); the sandbox reaches only the package host its network
 * settings allow. Run: `node examples/run.mjs e2b-sudo-apt` (needs a running Warren and the E2B
 * variables, see docs/e2b.md; set APT_SOURCE to a sources.list line of a mirror Warren may reach).
 */
import { ALL_TRAFFIC, Sandbox } from 'e2b';

export interface AptOptions {
  apiKey?: string;
  apiUrl?: string;
  sandboxUrl?: string;
  /** The `sources.list` line to install from (default Debian's archive for bookworm). */
  aptSource?: string;
  /** What to install, and the command that uses it. */
  packages?: string[];
  use?: string;
}

/** Installs the packages with sudo apt-get in a new sandbox, runs the tool, returns its output, and kills the sandbox. */
export async function main(options: AptOptions = {}): Promise<string> {
  const { aptSource = process.env.APT_SOURCE ?? 'deb http://deb.debian.org/debian bookworm main', packages = ['jq'] } = options;
  const use = options.use ?? `echo '{"installed": "jq"}' | jq -r .installed`;
  const host = new URL(/https?:\/\/\S+/.exec(aptSource)?.[0] ?? 'http://deb.debian.org').hostname;
  const sandbox = await Sandbox.create({
    apiKey: options.apiKey,
    apiUrl: options.apiUrl,
    sandboxUrl: options.sandboxUrl,
    network: { allowOut: [host], denyOut: [ALL_TRAFFIC] },
  });
  try {
    await sandbox.commands.run(`echo '${aptSource}' | sudo tee /etc/apt/sources.list.d/setup.list >/dev/null`);
    await sandbox.commands.run('sudo rm -f /etc/apt/sources.list /etc/apt/sources.list.d/debian.sources');
    await sandbox.commands.run('sudo apt-get update -q', { timeoutMs: 300_000 });
    await sandbox.commands.run(`sudo apt-get install -y -q ${packages.join(' ')}`, { timeoutMs: 300_000 });
    const { stdout } = await sandbox.commands.run(use);
    console.log(stdout.trim());
    return stdout.trim();
  } finally {
    await sandbox.kill();
  }
}
