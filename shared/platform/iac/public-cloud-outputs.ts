import type { OutputModel } from './computed-outputs';

export function publicCloudModel(type: string): OutputModel | undefined {
  void type;
  return undefined;
}
