/** A command-line script's refusal: one line naming the command and what to do, then exit status 1. */
export const failsAs =
  (command: string) =>
  (message: string): never => {
    console.error(`${command}: ${message}`);
    process.exit(1);
  };
