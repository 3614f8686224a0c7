// @ts-check
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', 'dist/', '.tmp/', '.runtime-cloud/', 'infra/node_modules/', 'infra/bin/', 'coverage/', 'contracts/gen/', '**/*.cjs', '**/*.js', '**/*.mjs'] },
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' }],
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/only-throw-error': 'error',
    },
  },
  {
    // Orchestrators are replayed: they must be deterministic (docs/conventions.md, "Durable orchestrations").
    files: ['**/*.orchestrator.ts'],
    rules: {
      'no-restricted-globals': ['error', 'Date', 'setTimeout', 'setInterval', 'fetch', 'process'],
      'no-restricted-properties': ['error', { object: 'Math', property: 'random', message: 'use context.df.newGuid' }],
      'no-restricted-imports': ['error', { patterns: ['node:*', 'fs', 'path', 'crypto', 'http', 'https', 'child_process', 'os'] }],
    },
  },
  {
    files: ['tests/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
);
