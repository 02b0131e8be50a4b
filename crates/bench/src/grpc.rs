//! The baseline users would pick instead: a gRPC (tonic) server exposing the
//! same built-in functions as one unary method, and a [`Caller`] for the
//! closed loop. Messages and service glue are written by hand (what
//! `tonic-build` would generate), so no `protoc` is needed:
//!
//! ```proto
//! service Accel { rpc Call(CallRequest) returns (CallReply); }
//! message CallRequest { uint32 function = 1; uint64 param = 2; bytes payload = 3; }
//! message CallReply { bytes payload = 1; uint64 exec_ns = 2; }
//! ```

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::Instant;

use offrac_accel::{AccelError, Accelerator};
use offrac_proto::{FunctionId, ResponseHeader, Status};
use tonic::codegen::{empty_body, http, Body, BoxFuture, Context, Poll, Service, StdError};

use crate::{BenchError, Caller, MixItem, Outcome};

const PATH: &str = "/offrac.Accel/Call";

#[derive(Clone, PartialEq, prost::Message)]
pub struct CallRequest {
    #[prost(uint32, tag = "1")]
    pub function: u32,
    #[prost(uint64, tag = "2")]
    pub param: u64,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CallReply {
    #[prost(bytes = "vec", tag = "1")]
    pub payload: Vec<u8>,
    #[prost(uint64, tag = "2")]
    pub exec_ns: u64,
}

thread_local! {
    /// Each runtime thread has its own instance of every built-in.
    static ACCELS: RefCell<Vec<Option<Box<dyn Accelerator>>>> = RefCell::new(
        (0..=u8::MAX)
            .map(|id| FunctionId::from_id(id).map(offrac_accel::builtin))
            .take_while(Option::is_some)
            .collect(),
    );
}

/// Run one call on this thread's accelerators.
// tonic's handlers answer `tonic::Status`; boxing it here would only be unboxed again.
#[allow(clippy::result_large_err)]
fn execute(req: &CallRequest) -> Result<CallReply, tonic::Status> {
    ACCELS.with(|cell| {
        let mut accels = cell.borrow_mut();
        let accel = u8::try_from(req.function)
            .ok()
            .and_then(|f| accels.get_mut(usize::from(f)))
            .and_then(Option::as_mut)
            .ok_or_else(|| tonic::Status::unimplemented(format!("function {}", req.function)))?;
        let mut out = Vec::new();
        let t = Instant::now();
        accel
            .run(req.param, &req.payload, &mut out)
            .map_err(|e| match e {
                AccelError::BadInput(m) => tonic::Status::invalid_argument(m),
                AccelError::Internal(m) => tonic::Status::internal(m),
            })?;
        Ok(CallReply {
            payload: out,
            exec_ns: t.elapsed().as_nanos() as u64,
        })
    })
}

struct CallSvc;

impl tonic::server::UnaryService<CallRequest> for CallSvc {
    type Response = CallReply;
    type Future = BoxFuture<tonic::Response<CallReply>, tonic::Status>;
    fn call(&mut self, request: tonic::Request<CallRequest>) -> Self::Future {
        let r = execute(request.get_ref()).map(tonic::Response::new);
        Box::pin(async move { r })
    }
}

/// The `offrac.Accel` service.
#[derive(Clone, Debug, Default)]
pub struct AccelServer;

impl tonic::server::NamedService for AccelServer {
    const NAME: &'static str = "offrac.Accel";
}

impl<B> Service<http::Request<B>> for AccelServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::BoxBody>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() == PATH {
            return Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic::codec::ProstCodec::default());
                Ok(grpc.unary(CallSvc, req).await)
            });
        }
        Box::pin(async move {
            let mut resp = http::Response::new(empty_body());
            let headers = resp.headers_mut();
            headers.insert(
                "grpc-status",
                http::HeaderValue::from(tonic::Code::Unimplemented as i32),
            );
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            Ok(resp)
        })
    }
}

/// A running gRPC baseline.
pub struct GrpcServer {
    pub addr: SocketAddr,
    runtime: tokio::runtime::Runtime,
}

impl GrpcServer {
    /// Block until the process is killed (for the CLI).
    pub fn wait(self) {
        self.runtime.block_on(std::future::pending::<()>());
    }

    pub fn shutdown(self) {
        self.runtime.shutdown_background();
    }
}

/// Serve on `listen` with a tokio runtime of `threads` worker threads.
pub fn serve_grpc(listen: &str, threads: usize) -> Result<GrpcServer, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    let std_listener =
        std::net::TcpListener::bind(listen).map_err(|source| BenchError::Connect {
            addr: listen.to_string(),
            source,
        })?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    let incoming = runtime.block_on(async {
        let l = tokio::net::TcpListener::from_std(std_listener)?;
        tonic::transport::server::TcpIncoming::from_listener(l, true, None)
            .map_err(|e| std::io::Error::other(e.to_string()))
    })?;
    runtime.spawn(async move {
        let r = tonic::transport::Server::builder()
            .add_service(AccelServer)
            .serve_with_incoming(incoming)
            .await;
        if let Err(e) = r {
            eprintln!("gRPC server stopped: {e}");
        }
    });
    Ok(GrpcServer { addr, runtime })
}

/// One gRPC connection driven synchronously (its own single-thread runtime).
pub struct GrpcCaller {
    runtime: tokio::runtime::Runtime,
    client: tonic::client::Grpc<tonic::transport::Channel>,
}

impl GrpcCaller {
    pub fn connect(addr: &str) -> Result<GrpcCaller, BenchError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| BenchError::Config(format!("gRPC address {addr}: {e}")))?
            .tcp_nodelay(true);
        let channel = runtime
            .block_on(endpoint.connect())
            .map_err(|e| BenchError::Connect {
                addr: addr.to_string(),
                source: std::io::Error::other(e.to_string()),
            })?;
        Ok(GrpcCaller {
            runtime,
            client: tonic::client::Grpc::new(channel),
        })
    }
}

fn status_of(code: tonic::Code) -> Status {
    match code {
        tonic::Code::InvalidArgument => Status::BadInput,
        tonic::Code::Unimplemented => Status::UnknownFunction,
        tonic::Code::ResourceExhausted => Status::Busy,
        _ => Status::Internal,
    }
}

impl Caller for GrpcCaller {
    fn call(&mut self, id: u64, item: &MixItem, payload: &[u8]) -> Result<Outcome, BenchError> {
        let req = CallRequest {
            function: u32::from(item.function.id()),
            param: item.param,
            payload: payload.to_vec(),
        };
        let start = Instant::now();
        let client = &mut self.client;
        let result = self.runtime.block_on(async move {
            client
                .ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            client
                .unary(
                    tonic::Request::new(req),
                    http::uri::PathAndQuery::from_static(PATH),
                    tonic::codec::ProstCodec::<CallRequest, CallReply>::default(),
                )
                .await
        });
        let (header, response_bytes) = match result {
            Ok(resp) => {
                let reply = resp.into_inner();
                let mut h = ResponseHeader::new(Status::Ok, id, reply.payload.len() as u32);
                h.exec_ns = reply.exec_ns;
                (h, reply.payload.len())
            }
            Err(s) if s.code() == tonic::Code::Unavailable => {
                return Err(BenchError::Io(std::io::Error::other(s.to_string())))
            }
            Err(s) => (ResponseHeader::new(status_of(s.code()), id, 0), 0),
        };
        Ok(Outcome {
            header,
            response_bytes,
            // The request goes to the HTTP/2 stack whole; no later send point is visible.
            last_fragment: start,
        })
    }
}
