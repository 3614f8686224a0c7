import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A setting of host.json, as the Functions host reads it: an app setting `AzureFunctionsJobHost__<path, by __>`
 * overrides the file (for example `AzureFunctionsJobHost__concurrency__dynamicConcurrencyEnabled=false`). Values of
 * app settings are strings; `true`, `false` and numbers are read as such. Undefined when neither has it.
 */
export function hostJsonSetting(...path: readonly string[]): unknown {
  const override = process.env[['AzureFunctionsJobHost', ...path].join('__')];
  if (override !== undefined) return parseSetting(override);
  let value: unknown = hostJsonFile();
  for (const key of path) value = value && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined;
  return value;
}

/**
 * A text setting (a version, a name): an app setting's value as written (`2.0` stays `2.0`), else the file's string
 * or number as text. Undefined when neither has it.
 */
export function hostJsonText(...path: readonly string[]): string | undefined {
  const override = process.env[['AzureFunctionsJobHost', ...path].join('__')];
  if (override !== undefined) return override;
  const value = hostJsonSetting(...path);
  return typeof value === 'string' || typeof value === 'number' ? String(value) : undefined;
}

/** A count setting (a positive integer), or undefined when it is absent or not one. */
export function hostJsonCount(...path: readonly string[]): number | undefined {
  const value = hostJsonSetting(...path);
  return typeof value === 'number' && Number.isInteger(value) && value > 0 ? value : undefined;
}

let file: unknown;
let appDir = join(__dirname, '..');

/** Reads host.json from the folder of the app the host runs (`runtime-cloud start --app DIR`) from now on. */
export function useAppHostJson(dir: string): void {
  appDir = dir;
  file = undefined;
}

function hostJsonFile(): unknown {
  file ??= JSON.parse(readFileSync(join(appDir, 'host.json'), 'utf8')) as unknown;
  return file;
}

function parseSetting(text: string): unknown {
  if (text === 'true' || text === 'false') return text === 'true';
  const number = Number(text);
  return text.trim() !== '' && Number.isFinite(number) ? number : text;
}
