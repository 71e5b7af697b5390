/** The loopback OpenAI-compatible upstream of bench:embeddings, in its own process, on PORT. */
import { startFakeUpstream } from '../test/helpers/fake-embeddings-upstream.ts';

const fake = await startFakeUpstream(Number(process.env.PORT));
process.on('SIGTERM', () => void fake.close().then(() => process.exit(0)));
