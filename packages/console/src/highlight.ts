// highlight.js core with a few common languages (the whole set would triple the bundle). Its output
// is HTML in which the file's own text is escaped; nothing else is ever put into the page as HTML.
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import css from 'highlight.js/lib/languages/css';
import go from 'highlight.js/lib/languages/go';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import markdown from 'highlight.js/lib/languages/markdown';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

const LANGUAGES = { bash, css, go, javascript, json, markdown, python, rust, typescript, xml, yaml };
for (const [name, language] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, language);

const BY_SUFFIX: Record<string, string> = {
  sh: 'bash',
  bash: 'bash',
  css: 'css',
  go: 'go',
  js: 'javascript',
  mjs: 'javascript',
  cjs: 'javascript',
  jsx: 'javascript',
  json: 'json',
  md: 'markdown',
  py: 'python',
  rs: 'rust',
  ts: 'typescript',
  tsx: 'typescript',
  html: 'xml',
  xml: 'xml',
  svg: 'xml',
  yml: 'yaml',
  yaml: 'yaml',
};

/** Files larger than this are shown as plain text. */
const MAX_HIGHLIGHT = 256 * 1024;

/** The language a file name suggests, if it is one of the few registered. */
export function languageOf(name: string): string | undefined {
  return BY_SUFFIX[name.split('.').pop()?.toLowerCase() ?? ''];
}

/** Highlighted HTML of `text` (its characters escaped by highlight.js), or undefined for plain text. */
export function highlighted(text: string, name: string): string | undefined {
  const language = languageOf(name);
  if (!language || text.length > MAX_HIGHLIGHT) return undefined;
  return hljs.highlight(text, { language, ignoreIllegals: true }).value;
}
