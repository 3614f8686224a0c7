import type { HostComponent } from './host';

/** The components of a full local host, in start order. */
export function localComponents(): HostComponent[] {
  return [];
}
