import { describe, expect, it } from 'vitest';
import { lazySchema, zod } from '../../shared/platform/validation/lazy-schema';

/** Schemas the functions name when they register are built on their first use, once (cold start). */
describe('lazySchema', () => {
  it('when a schema is declared, then it is not built until it is first called', () => {
    let builds = 0;
    const schema = lazySchema((z) => {
      builds++;
      return z.object({ name: z.string().min(1) });
    });
    expect(builds).toBe(0);

    expect(schema().safeParse({ name: 'a' }).success).toBe(true);
    expect(builds).toBe(1);
  });

  it('when a schema is called again, then the same schema is returned and it is not built again', () => {
    let builds = 0;
    const schema = lazySchema((z) => {
      builds++;
      return z.string();
    });
    const first = schema();
    expect(schema()).toBe(first);
    expect(builds).toBe(1);
  });

  it('when a schema is built, then it validates as the same zod schema declared directly would', () => {
    const schema = lazySchema((z) => z.object({ count: z.number().int().positive() }));
    const direct = zod().object({ count: zod().number().int().positive() });
    for (const input of [{ count: 2 }, { count: 0 }, { count: 'x' }, {}]) {
      expect(schema().safeParse(input)).toEqual(direct.safeParse(input));
    }
  });
});
