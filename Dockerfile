# The service on Node 24 LTS, running its TypeScript sources directly (Node strips the types; no build step).
FROM node:24-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force
# The service reads openapi.yaml, asyncapi.yaml, generated/openapi.json and package.json at start.
COPY openapi.yaml asyncapi.yaml ./
COPY generated ./generated
COPY src ./src
EXPOSE 7130
USER node
# The V8 flags: see SERVICE_NODE_FLAGS in scripts/lib/service-process.ts.
CMD ["node", "--liftoff-only", "--max-semi-space-size=4", "--v8-pool-size=2", "src/start.mjs"]
