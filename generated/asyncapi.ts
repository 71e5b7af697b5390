// Generated from asyncapi.yaml by `npm run generate`. Do not edit.
export type paths = Record<string, never>;
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /**
         * @description A realtime channel's name (payload data, not an address of this document).
         * @example room:lobby
         * @example public:news
         * @example user@example.com/inbox
         */
        ChannelName: string;
        /**
         * @description The socket.io event name a published message is delivered under:
         *     1–64 characters, not starting with `realtime:` or `presence:`
         *     (reserved by this protocol) and none of socket.io's reserved names.
         * @example chat.message
         * @example cursor:move
         * @example notice
         */
        EventName: string;
        /**
         * @example {
         *       "channel": "room:lobby"
         *     }
         */
        SubscribeRequest: {
            channel: components["schemas"]["ChannelName"];
        };
        /**
         * @description Failure codes: `UNAUTHORIZED` (the subscribe policies do not let the
         *     caller see the channel: nonexistent, disabled and forbidden look the
         *     same), `INVALID_PAYLOAD`, `SERVICE_UNAVAILABLE`, `INTERNAL_ERROR`. On a
         *     failure `channel` is the request's `channel` when that is a string,
         *     else `null`.
         * @example {
         *       "ok": true,
         *       "channel": "room:lobby",
         *       "presence": {
         *         "members": [
         *           {
         *             "presenceId": "0b4e9e53-8f1c-4b7e-9a55-2f0d6c1e8a31",
         *             "userId": "5f8d2c1a-3b4e-4f6a-8c9d-0e1f2a3b4c5d"
         *           }
         *         ]
         *       }
         *     }
         */
        SubscribeResponse: {
            /** @constant */
            ok: true;
            channel: components["schemas"]["ChannelName"];
            presence: {
                /** @description Every subscriber of the channel on every instance that answered in time, the caller included. */
                members: components["schemas"]["PresenceMember"][];
            };
        } | {
            /** @constant */
            ok: false;
            channel: string | null;
            error: components["schemas"]["ErrorDetail"];
        };
        /**
         * @example {
         *       "channel": "room:lobby"
         *     }
         */
        UnsubscribeRequest: {
            channel: components["schemas"]["ChannelName"];
        };
        /**
         * @description `ok: true` also when the socket was not subscribed to the channel.
         *     `ok: false` only for a malformed request (`INVALID_PAYLOAD`), with
         *     `channel` as given when it is a string, else `null`.
         * @example {
         *       "ok": true,
         *       "channel": "room:lobby"
         *     }
         */
        UnsubscribeResponse: {
            /** @constant */
            ok: true;
            channel: components["schemas"]["ChannelName"];
        } | {
            /** @constant */
            ok: false;
            channel: string | null;
            error: components["schemas"]["ErrorDetail"];
        };
        /**
         * @example {
         *       "channel": "room:lobby",
         *       "event": "chat.message",
         *       "payload": {
         *         "text": "hello"
         *       }
         *     }
         */
        PublishRequest: {
            channel: components["schemas"]["ChannelName"];
            event: components["schemas"]["EventName"];
            /**
             * @description The message: a JSON object without a `meta` key (the server adds
             *     `meta` when delivering it), at most `REALTIME_MAX_PAYLOAD_BYTES`
             *     (default 4096) bytes as JSON. No object in it, at any depth, may
             *     have a key named `__proto__`, `constructor` or `prototype`
             *     (`INVALID_PAYLOAD`, as `400 INVALID_INPUT` over HTTP).
             */
            payload: {
                [key: string]: unknown;
            };
            /**
             * Format: uuid
             * @description Defaults to the caller's user id; the default publish policy
             *     refuses any other value (`UNAUTHORIZED`).
             */
            senderId?: string;
        };
        /**
         * @description Failure codes: `NOT_SUBSCRIBED`, `UNAUTHORIZED` (the publish policies
         *     refuse the insert, for example a `senderId` that is not the caller's),
         *     `INVALID_PAYLOAD`, `PAYLOAD_TOO_LARGE`, `RATE_LIMITED`,
         *     `SERVICE_UNAVAILABLE` (the database, or the fan-out between
         *     instances, cannot take the message now: it is neither delivered nor
         *     kept in history), `INTERNAL_ERROR`; the sender also receives a
         *     `realtime:error` with the same code. On a failure `channel` is the
         *     request's `channel` when that is a string, else `null`.
         * @example {
         *       "ok": true,
         *       "channel": "room:lobby",
         *       "messageId": "3d6f0a8e-2b1c-4e5d-9f7a-8b9c0d1e2f3a"
         *     }
         */
        PublishResponse: {
            /** @constant */
            ok: true;
            channel: components["schemas"]["ChannelName"];
            /** Format: uuid */
            messageId: string;
        } | {
            /** @constant */
            ok: false;
            channel: string | null;
            error: components["schemas"]["ErrorDetail"];
        };
        /**
         * @description The published `payload`'s own keys, and `meta`.
         * @example {
         *       "text": "hello",
         *       "meta": {
         *         "channel": "room:lobby",
         *         "messageId": "3d6f0a8e-2b1c-4e5d-9f7a-8b9c0d1e2f3a",
         *         "senderType": "user",
         *         "senderId": "5f8d2c1a-3b4e-4f6a-8c9d-0e1f2a3b4c5d",
         *         "timestamp": "2025-01-15T10:30:00.000Z"
         *       }
         *     }
         */
        BroadcastMessage: {
            meta: components["schemas"]["MessageMeta"];
        } & {
            [key: string]: unknown;
        };
        /**
         * @example {
         *       "channel": "room:lobby",
         *       "messageId": "3d6f0a8e-2b1c-4e5d-9f7a-8b9c0d1e2f3a",
         *       "senderType": "user",
         *       "senderId": "5f8d2c1a-3b4e-4f6a-8c9d-0e1f2a3b4c5d",
         *       "timestamp": "2025-01-15T10:30:00.000Z"
         *     }
         */
        MessageMeta: {
            channel: components["schemas"]["ChannelName"];
            /**
             * Format: uuid
             * @description The stored message's id (`after` of `GET /api/realtime/messages`).
             */
            messageId: string;
            /** @enum {string} */
            senderType: "user" | "system";
            /**
             * Format: uuid
             * @description The publishing user's id; `null` for an anonymous or system sender.
             */
            senderId: string | null;
            /**
             * Format: date-time
             * @description When the message was stored (ISO 8601).
             */
            timestamp: string;
        };
        /**
         * @description `channel` is the channel the error is about as the client gave it
         *     (a string, possibly not a valid `ChannelName` when that is the error),
         *     or `null` when there is none: unknown events, `TOKEN_EXPIRED`,
         *     `SESSION_REVOKED`, `SLOW_CONSUMER`, and requests without a string
         *     `channel`.
         * @example {
         *       "code": "UNKNOWN_EVENT",
         *       "message": "unknown event \"chat\"",
         *       "channel": null
         *     }
         */
        RealtimeError: {
            code: components["schemas"]["RealtimeErrorCode"];
            /** @description For people; may change. Programs read `code`. */
            message: string;
            channel: string | null;
        };
        /**
         * @description See the table of codes in the document's description.
         * @enum {string}
         */
        RealtimeErrorCode: "UNAUTHORIZED" | "NOT_SUBSCRIBED" | "INVALID_PAYLOAD" | "PAYLOAD_TOO_LARGE" | "UNKNOWN_EVENT" | "RATE_LIMITED" | "TOKEN_EXPIRED" | "SESSION_REVOKED" | "MFA_REQUIRED" | "SLOW_CONSUMER" | "TOO_MANY_SUBSCRIPTIONS" | "TOO_MANY_CONNECTIONS" | "SERVICE_UNAVAILABLE" | "INTERNAL_ERROR";
        /**
         * @description The `error` of a failed acknowledgement, and the `err.data` of a
         *     refused connection's `connect_error` (code `UNAUTHORIZED`,
         *     `TOKEN_EXPIRED`, `SESSION_REVOKED`, `MFA_REQUIRED`,
         *     `TOO_MANY_CONNECTIONS` or `INTERNAL_ERROR`).
         * @example {
         *       "code": "TOKEN_EXPIRED",
         *       "message": "the access token has expired"
         *     }
         */
        ErrorDetail: {
            code: components["schemas"]["RealtimeErrorCode"];
            /** @description For people; may change. Programs read `code`. */
            message: string;
        };
        /**
         * @description The payload of `presence:join` and `presence:leave`.
         * @example {
         *       "meta": {
         *         "channel": "room:lobby"
         *       },
         *       "member": {
         *         "presenceId": "7c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f",
         *         "userId": null
         *       }
         *     }
         */
        PresenceEvent: {
            meta: {
                channel: components["schemas"]["ChannelName"];
            };
            member: components["schemas"]["PresenceMember"];
        };
        /**
         * @description One subscribed socket.
         * @example {
         *       "presenceId": "0b4e9e53-8f1c-4b7e-9a55-2f0d6c1e8a31",
         *       "userId": "5f8d2c1a-3b4e-4f6a-8c9d-0e1f2a3b4c5d"
         *     }
         */
        PresenceMember: {
            /** @description Opaque, one per connection (a UUID today); compare, do not parse. */
            presenceId: string;
            /**
             * Format: uuid
             * @description The user's id; `null` for an anonymous connection.
             */
            userId: string | null;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export type operations = Record<string, never>;
