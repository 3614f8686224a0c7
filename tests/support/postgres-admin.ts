import pg from 'pg';

/** Runs one statement as the server's administrator (schemas are created and dropped this way). */
export async function adminQuery(url: string, text: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}
