import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(__dirname, '..', '..');

describe("the operator console's API types", () => {
  it('when openapi.json is turned into types by openapi-typescript, then they equal the checked-in console/src/api-types.d.ts (regenerate with npm run console:types)', async () => {
    // Arrange
    const { default: openapiTS, astToString, COMMENT_HEADER } = await import('openapi-typescript');
    const document = JSON.parse(readFileSync(join(root, 'openapi.json'), 'utf8')) as Parameters<typeof openapiTS>[0];

    // Act
    const generated = COMMENT_HEADER + astToString(await openapiTS(document));

    // Assert
    expect(readFileSync(join(root, 'console', 'src', 'api-types.d.ts'), 'utf8')).toBe(generated);
  });
});
