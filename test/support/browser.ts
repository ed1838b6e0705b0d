import { chromium, type BrowserContext } from 'playwright-core';

/** Debian's Chromium (scripts/lib/common.sh `ensure_chromium`), or the one `WARREN_CHROMIUM` names. */
export const CHROMIUM = process.env.WARREN_CHROMIUM ?? '/usr/bin/chromium';

/**
 * A headless Chromium with its own profile in `userDataDir`, quiet: no background traffic, no
 * component updates, no QUIC (the browser tests send packets only to the controller they start).
 */
export function launchChromium(userDataDir: string, options: { viewport?: { width: number; height: number } } = {}): Promise<BrowserContext> {
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    ...options,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
