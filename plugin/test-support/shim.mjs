// Node 20 lacks Promise.withResolvers, which the harness agent loop uses (Node 22+).
Promise.withResolvers ??= function withResolvers() {
  let resolve, reject
  const promise = new this((a, b) => {
    resolve = a
    reject = b
  })
  return { promise, resolve, reject }
}
