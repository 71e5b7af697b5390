# Build: compile the TypeScript sources into dist/.
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY generated ./generated
COPY src ./src
RUN node_modules/.bin/tsc -p tsconfig.build.json

# Run: production dependencies and the build only. The service reads openapi.yaml, asyncapi.yaml,
# generated/openapi.json and package.json at start.
FROM node:20-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force
COPY openapi.yaml asyncapi.yaml ./
COPY generated/openapi.json ./generated/
COPY --from=build /app/dist ./dist
EXPOSE 7130
USER node
CMD ["node", "dist/src/server.js"]
