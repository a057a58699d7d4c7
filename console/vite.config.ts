import { defineConfig } from "vite";

// Relative asset paths: the studio serves the built files at "/".
export default defineConfig({
  base: "/",
  build: { target: "es2020", chunkSizeWarningLimit: 400 },
});
