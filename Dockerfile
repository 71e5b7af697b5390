FROM node:20-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# tsx runs the TypeScript sources directly, so the install keeps what `npm start` needs.
RUN npm ci --no-audit --no-fund --ignore-scripts && npm cache clean --force
COPY openapi.yaml tsconfig.json ./
COPY generated ./generated
COPY src ./src
COPY scripts ./scripts
EXPOSE 7130
USER node
CMD ["node", "--import", "tsx", "src/server.ts"]
