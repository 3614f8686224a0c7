/**
 * Opaque list cursors (`?cursor=` and `nextCursor` of every list): the key of the last item of a page, base64url
 * encoded. A text that this function did not make decodes to undefined, which the caller answers with 400.
 */
export function encodeCursor(lastKey: string): string {
  return Buffer.from(lastKey, 'utf8').toString('base64url');
}

export function decodeCursor(cursor: string): string | undefined {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  return text.length > 0 && encodeCursor(text) === cursor ? text : undefined;
}
