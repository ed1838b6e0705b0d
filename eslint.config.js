// ESLint flat config: typescript-eslint's recommended rules with type information, so promises
// that are neither awaited nor handled, and promises passed where a callback's result is ignored,
// are errors. Formatting is Prettier's job (`pnpm format`), not ESLint's.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/dist/**',
      'packages/controller/src/e2b/gen/**',
      '**/node_modules/**',
      '.warren/**',
      'bench-results/**',
      '**/*.d.ts',
      '**/*.mjs',
      '**/*.js',
      '**/*.cjs',
      // Programs that run as they are, not through tsc: linted as JavaScript below.
      '!packages/agent/src/runtimes/*.cjs',
      'jest.config.ts',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      // Handlers and fakes are async by contract (the dispatch table awaits every one), whether
      // or not a given one awaits anything itself.
      '@typescript-eslint/require-await': 'off',
      // Tools report failure as data (seed tool sets): a ToolError value is thrown and the tool
      // runner catches it and returns it as the result, so throwing non-Error values is the design.
      '@typescript-eslint/only-throw-error': 'off',
      // A package's surface is named, export by export: `export *` would publish whatever a module adds.
      'no-restricted-syntax': ['error', { selector: 'ExportAllDeclaration', message: 'Export names explicitly: `export { a, type B } from`.' }],
      // `_name` marks a binding kept on purpose (a destructured field left out, an unused parameter).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
    },
  },
  {
    // Tests read JSON answers and hostile inputs as they come; `any` there is the point.
    files: ['test/**/*.ts', 'packages/*/test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
    },
  },
  {
    // The code interpreter's Node REPL (packages/agent/src/runtimes), run as `node -e <text>` in a
    // sandbox: a CommonJS script in Node, without types, so the type-aware rules do not apply.
    files: ['packages/agent/src/runtimes/*.cjs'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      ...tseslint.configs.disableTypeChecked.languageOptions,
      sourceType: 'commonjs',
      globals: { require: 'readonly', process: 'readonly', Buffer: 'readonly', setImmediate: 'readonly', globalThis: 'readonly' },
    },
    rules: { ...tseslint.configs.disableTypeChecked.rules, '@typescript-eslint/no-require-imports': 'off' },
  },
);
